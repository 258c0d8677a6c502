// CUDA kernels of the edge softmax (forward and backward). Torch-free: ../edge_softmax.cu
// launches them.
//
// Values are [E, H], edges grouped by destination row through ptr, so the values of one row
// are the contiguous range [ptr[r] * H, ptr[r + 1] * H). Both passes have the same shape: a
// reduction over the row per head (forward: running max and sum of exponentials; backward:
// sum of out * grad), then a write pass over the same range. A policy (SoftmaxForward,
// SoftmaxBackward) says what is loaded, folded, merged and written; edge_softmax_rows_kernel
// says who walks which row, with two kinds of blocks in one launch:
//  * short-row blocks: a group of LANES lanes (a power of two, H <= LANES <= 32) per row,
//    several rows per warp when rows are short, for rows a group covers in at most
//    kShortRowRounds rounds of kUnroll loads. The group strides over the row with step
//    `width` = (LANES / H) * H, so a lane always sees the same head and loads are coalesced;
//    lanes of one head combine with a shuffle tree.
//  * long-row blocks (the last ones of the grid): each scans its own slice of ptr; a warp walks
//    each of its medium rows (up to kLongRowValues values) and the whole block each longer
//    row, so neither a row of 10^3 edges is left to a group of 4 lanes nor one of 10^5 to a
//    warp (on power-law graphs that tail set the run time: each round of loads is a memory
//    latency, 32 rounds of it took longer than all short rows together).
// Loads are issued kUnroll at a time before they are used, so a lane keeps several requests in
// flight instead of waiting for each one.
#pragma once

#include <cmath>
#include <cstdint>

#include "coo.cuh"

namespace pyg_fast::cuda {

constexpr int kSoftmaxThreadsPerBlock = 256;
constexpr int kSoftmaxWarpsPerBlock = kSoftmaxThreadsPerBlock / 32;
constexpr int kUnroll = 4;
// A group of LANES < 32 lanes walks rows of up to LANES * kUnroll * kShortRowRounds values; a
// warp those of up to kLongRowValues; the block the rest.
constexpr int kShortRowRounds = 4;
constexpr int64_t kLongRowValues = 32 * kUnroll * 8;
constexpr unsigned kFullWarpMask = 0xffffffffu;

template <typename acc_t>
__device__ __forceinline__ acc_t exp_acc(acc_t v) { return exp(v); }  // expf for float (exact, not __expf)

template <typename acc_t>
__device__ __forceinline__ acc_t neg_inf() { return -static_cast<acc_t>(INFINITY); }

// Forward: state (m, s) = running max and sum of exp(v - m); identity (-inf, 0).
template <typename scalar_t, typename acc_t>
struct SoftmaxForward {
  const scalar_t* __restrict__ src;
  scalar_t* __restrict__ out;
  struct State {
    acc_t m, s;
  };
  using Item = acc_t;

  __device__ State identity() const { return {neg_inf<acc_t>(), acc_t(0)}; }
  __device__ Item load(int64_t k) const { return static_cast<acc_t>(src[k]); }
  // A -inf value adds exp(-inf) = 0; tested apart, since -inf - -inf (a row that starts with -inf
  // values, e.g. masked edges) is NaN.
  __device__ static void fold(State& st, Item v) {
    if (v > st.m) {
      st.s = st.s * exp_acc(st.m - v) + acc_t(1);
      st.m = v;
    } else if (v > neg_inf<acc_t>()) {
      st.s += exp_acc(v - st.m);
    }
  }
  __device__ static void merge(State& a, const State& b) {
    if (b.s == acc_t(0)) return;  // the other side saw nothing
    if (a.s == acc_t(0)) {
      a = b;
      return;
    }
    const acc_t mx = a.m > b.m ? a.m : b.m;
    a.s = a.s * exp_acc(a.m - mx) + b.s * exp_acc(b.m - mx);
    a.m = mx;
  }
  __device__ static State shfl_down(const State& st, int delta, int width) {
    return {__shfl_down_sync(kFullWarpMask, st.m, delta, width), __shfl_down_sync(kFullWarpMask, st.s, delta, width)};
  }
  __device__ static State shfl(const State& st, int lane, int width) {
    return {__shfl_sync(kFullWarpMask, st.m, lane, width), __shfl_sync(kFullWarpMask, st.s, lane, width)};
  }
  __device__ void store(int64_t k, Item v, const State& st) const {
    out[k] = static_cast<scalar_t>(exp_acc(v - st.m) / (st.s + acc_t(1e-16)));
  }
};

// Backward: grad_src = out * (grad_out - sum(out * grad_out)); state = that sum.
template <typename scalar_t, typename acc_t>
struct SoftmaxBackward {
  const scalar_t* __restrict__ out;
  const scalar_t* __restrict__ grad_out;
  scalar_t* __restrict__ grad_src;
  struct State {
    acc_t dot;
  };
  struct Item {
    acc_t y, g;
  };

  __device__ State identity() const { return {acc_t(0)}; }
  __device__ Item load(int64_t k) const { return {static_cast<acc_t>(out[k]), static_cast<acc_t>(grad_out[k])}; }
  __device__ static void fold(State& st, Item it) { st.dot += it.y * it.g; }
  __device__ static void merge(State& a, const State& b) { a.dot += b.dot; }
  __device__ static State shfl_down(const State& st, int delta, int width) {
    return {__shfl_down_sync(kFullWarpMask, st.dot, delta, width)};
  }
  __device__ static State shfl(const State& st, int lane, int width) {
    return {__shfl_sync(kFullWarpMask, st.dot, lane, width)};
  }
  __device__ void store(int64_t k, Item it, const State& st) const {
    grad_src[k] = static_cast<scalar_t>(it.y * (it.g - st.dot));
  }
};

// Calls visit(k, item) for the values k = begin, begin + step, ... < end, with kUnroll loads in
// flight before the first of them is used.
template <typename Policy, typename Visit>
__device__ __forceinline__ void visit_range(const Policy& p, int64_t begin, int64_t end, int64_t step,
                                            const Visit& visit) {
  for (int64_t k = begin; k < end; k += step * kUnroll) {
    typename Policy::Item items[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k + u * step < end) items[u] = p.load(k + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k + u * step < end) visit(k + u * step, items[u]);
  }
}

template <typename Policy>
__device__ __forceinline__ void fold_range(const Policy& p, typename Policy::State& st, int64_t begin, int64_t end,
                                           int64_t step) {
  visit_range(p, begin, end, step, [&](int64_t, const typename Policy::Item& item) { Policy::fold(st, item); });
}

template <typename Policy>
__device__ __forceinline__ void store_range(const Policy& p, const typename Policy::State& st, int64_t begin,
                                            int64_t end, int64_t step) {
  visit_range(p, begin, end, step, [&](int64_t k, const typename Policy::Item& item) { p.store(k, item, st); });
}

// Merges st over the lanes of one head inside a group of `group` lanes (lanes h, h + H, ...
// of the group); afterwards every lane holds its head's total. Called by all 32 lanes.
template <typename Policy>
__device__ __forceinline__ void reduce_head_lanes(typename Policy::State& st, int sublane, int heads, int group) {
  const int slots = group / heads, g = sublane / heads;
  for (int off = 1; off < slots; off <<= 1) {
    const auto other = Policy::shfl_down(st, off * heads, group);
    if (g + off < slots) Policy::merge(st, other);
  }
  st = Policy::shfl(st, sublane % heads, group);
}

// Returns whether row r has a well-formed edge range [lo, hi) (malformed rows are skipped).
__device__ __forceinline__ bool row_range(const int64_t* __restrict__ ptr, int64_t r, int64_t num_edges,
                                          int64_t& lo, int64_t& hi) {
  lo = ptr[r];
  hi = ptr[r + 1];
  return lo >= 0 && hi >= lo && hi <= num_edges;
}

// Values a group of `lanes` lanes walks at most (the short-row limit). A whole-warp group keeps
// the medium rows itself: moving them to the long-row blocks was measured 7-13% slower.
__host__ __device__ constexpr int64_t short_row_values(int lanes) {
  return lanes == 32 ? kLongRowValues : lanes * kUnroll * kShortRowRounds;
}

// Walks the values [lo * heads, hi * heads) of one row with the LANES lanes of a group
// (`sublane` = this lane's index in it). Called by every lane of the warp, also inactive ones.
template <int LANES, typename Policy>
__device__ __forceinline__ void walk_row(const Policy& p, bool active, int64_t lo, int64_t hi, int sublane,
                                         int heads) {
  const int width = (LANES / heads) * heads;
  const int64_t begin = lo * heads + sublane, end = hi * heads;
  auto st = p.identity();
  if (active && sublane < width) fold_range(p, st, begin, end, width);
  reduce_head_lanes<Policy>(st, sublane, heads, LANES);  // every lane takes part in the shuffles
  if (active && sublane < width) store_range(p, st, begin, end, width);
}

// Short rows: heads <= LANES <= 32 (LANES a power of two); `first_row` is this block's first.
template <int LANES, typename Policy>
__device__ __forceinline__ void walk_short_rows(const Policy& p, const int64_t* __restrict__ ptr, int64_t first_row,
                                                int64_t num_rows, int64_t num_edges, int heads) {
  constexpr int kRowsPerWarp = 32 / LANES;
  const int lane = threadIdx.x & 31;
  const int64_t row = first_row + (threadIdx.x >> 5) * kRowsPerWarp + lane / LANES;
  int64_t lo = 0, hi = 0;
  const bool active = row < num_rows && row_range(ptr, row, num_edges, lo, hi) &&
                      (hi - lo) * heads <= short_row_values(LANES);
  walk_row<LANES>(p, active, lo, hi, lane % LANES, heads);
}

// Rows among [first_row, first_row + blockDim.x) too long for a group of LANES lanes: each
// medium row walked by one warp, each longer row by the whole block (heads <= 32).
template <int LANES, typename Policy>
__device__ __forceinline__ void walk_long_rows(const Policy& p, const int64_t* __restrict__ ptr, int64_t first_row,
                                               int64_t num_rows, int64_t num_edges, int heads) {
  __shared__ int64_t medium_rows[kSoftmaxThreadsPerBlock], long_rows[kSoftmaxThreadsPerBlock];
  __shared__ int num_medium, num_long;
  __shared__ typename Policy::State partial[kSoftmaxWarpsPerBlock][32];
  if (threadIdx.x == 0) num_medium = num_long = 0;
  __syncthreads();
  const int64_t mine = first_row + threadIdx.x;
  int64_t lo, hi;
  if (mine < num_rows && row_range(ptr, mine, num_edges, lo, hi)) {
    const int64_t values = (hi - lo) * heads;
    if (values > kLongRowValues)
      long_rows[atomicAdd(&num_long, 1)] = mine;
    else if (values > short_row_values(LANES))
      medium_rows[atomicAdd(&num_medium, 1)] = mine;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = warp; i < num_medium; i += kSoftmaxWarpsPerBlock) {  // uniform per warp
    row_range(ptr, medium_rows[i], num_edges, lo, hi);
    walk_row<32>(p, true, lo, hi, lane, heads);
  }
  const int width = (32 / heads) * heads;  // lanes of a warp in use; lane % heads is the head
  const int64_t step = static_cast<int64_t>(kSoftmaxWarpsPerBlock) * width;
  for (int i = 0; i < num_long; ++i) {
    row_range(ptr, long_rows[i], num_edges, lo, hi);
    const int64_t begin = lo * heads + warp * width + lane, end = hi * heads;
    auto st = p.identity();
    if (lane < width) fold_range(p, st, begin, end, step);
    reduce_head_lanes<Policy>(st, lane, heads, 32);
    if (lane < heads) partial[warp][lane] = st;
    __syncthreads();
    st = partial[0][lane % heads];
    for (int w = 1; w < kSoftmaxWarpsPerBlock; ++w) Policy::merge(st, partial[w][lane % heads]);
    if (lane < width) store_range(p, st, begin, end, step);
    __syncthreads();  // partial is reused by the next row
  }
}

// heads <= LANES <= 32. Launch with kSoftmaxThreadsPerBlock threads and short_blocks +
// long_blocks blocks: short_blocks = ceil(num_rows / (kSoftmaxWarpsPerBlock * 32 / LANES)),
// long_blocks = ceil(num_rows / kSoftmaxThreadsPerBlock), or 0 when no row can exceed
// short_row_values(LANES).
template <int LANES, typename Policy>
__global__ void edge_softmax_rows_kernel(Policy p, const int64_t* __restrict__ ptr, int64_t num_rows,
                                         int64_t num_edges, int heads, int64_t short_blocks) {
  if (blockIdx.x < short_blocks) {
    constexpr int64_t kRowsPerBlock = kSoftmaxWarpsPerBlock * (32 / LANES);
    walk_short_rows<LANES>(p, ptr, static_cast<int64_t>(blockIdx.x) * kRowsPerBlock, num_rows, num_edges, heads);
  } else {
    walk_long_rows<LANES>(p, ptr, (static_cast<int64_t>(blockIdx.x) - short_blocks) * kSoftmaxThreadsPerBlock, num_rows,
                   num_edges, heads);
  }
}

// Any number of heads: one thread per (row, head), sequential over the row's edges.
template <typename Policy>
__global__ void edge_softmax_thread_kernel(Policy p, const int64_t* __restrict__ ptr, int64_t num_rows,
                                           int64_t num_edges, int64_t heads) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t lo, hi;
  if (t >= num_rows * heads || !row_range(ptr, t / heads, num_edges, lo, hi)) return;
  const int64_t h = t % heads;
  auto st = p.identity();
  fold_range(p, st, lo * heads + h, hi * heads, heads);
  store_range(p, st, lo * heads + h, hi * heads, heads);
}

// The COO softmax (edge_softmax_coo): edges in any order, one thread per (edge, head) value and
// three passes, the maxima and sums per destination with atomics into acc [V, H] buffers. An edge
// whose index is out of [0, V) is skipped (its output 0) and raises flags[0].
enum class CooPass { Max, Sum, Write };

template <typename scalar_t, typename acc_t, CooPass PASS>
__global__ void edge_softmax_coo_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                                        int64_t num_values, int heads, int64_t num_nodes, acc_t* __restrict__ max,
                                        acc_t* __restrict__ sum, scalar_t* __restrict__ out,
                                        int64_t* __restrict__ flags) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = coo_slot(index, i, heads, num_nodes);
    const bool ok = slot >= 0;
    if constexpr (PASS == CooPass::Max) {
      if (ok) atomic_max_value(max + slot, static_cast<acc_t>(src[i]));
      else flags[0] = 1;
    } else if constexpr (PASS == CooPass::Sum) {
      if (ok) atomicAdd(sum + slot, exp(static_cast<acc_t>(src[i]) - max[slot]));
    } else {
      out[i] = ok ? static_cast<scalar_t>(exp(static_cast<acc_t>(src[i]) - max[slot]) / (sum[slot] + acc_t(1e-16)))
                  : scalar_t(0);
    }
  }
}

// Its backward: dot[d, h] = sum of out * grad over the edges of d, then grad_src = out * (grad - dot).
template <typename scalar_t, typename acc_t, bool WRITE>
__global__ void edge_softmax_coo_backward_kernel(const scalar_t* __restrict__ out, const scalar_t* __restrict__ grad,
                                                 const int64_t* __restrict__ index, int64_t num_values, int heads,
                                                 int64_t num_nodes, acc_t* __restrict__ dot,
                                                 scalar_t* __restrict__ grad_src) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = coo_slot(index, i, heads, num_nodes);
    const bool ok = slot >= 0;
    const acc_t y = static_cast<acc_t>(out[i]), g = static_cast<acc_t>(grad[i]);
    if constexpr (!WRITE) {
      if (ok) atomicAdd(dot + slot, y * g);
    } else {
      grad_src[i] = ok ? static_cast<scalar_t>(y * (g - dot[slot])) : scalar_t(0);
    }
  }
}

}  // namespace pyg_fast::cuda
