// CUDA kernels of the edge softmax (forward and backward). Torch-free: ../edge_softmax.cu
// launches them.
//
// Values are [E, H], edges grouped by destination row through ptr, so the values of one row
// are the contiguous range [ptr[r] * H, ptr[r + 1] * H). One warp owns one row: it strides
// over that range with step `width` = (32 / H) * H, so lane l always sees head l % H and the
// loads are coalesced. Lanes of the same head are then combined with a shuffle tree over
// lane offsets that are multiples of H, and the result is broadcast from lane h.
// The forward pass reads the values twice: an online (max, sum) pass, then the write pass.
// Rows with more than 32 heads use one thread per (row, head).
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

constexpr int kSoftmaxWarpsPerBlock = 8;
constexpr int kSoftmaxThreadsPerBlock = kSoftmaxWarpsPerBlock * 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

template <typename acc_t>
__device__ __forceinline__ acc_t exp_acc(acc_t v) { return exp(v); }  // expf for float (exact, not __expf)

// Online softmax state: running max m and sum of exp(v - m).
template <typename acc_t>
__device__ __forceinline__ void online_merge(acc_t& m, acc_t& s, acc_t m2, acc_t s2) {
  if (s2 == acc_t(0)) return;  // the other side saw nothing (or only exp underflow)
  if (s == acc_t(0)) {
    m = m2;
    s = s2;
    return;
  }
  const acc_t mx = m > m2 ? m : m2;
  s = s * exp_acc(m - mx) + s2 * exp_acc(m2 - mx);
  m = mx;
}

// Reduces (a, b) over the lanes h, h + H, h + 2H, ... (group index g = lane / H < groups);
// lane h ends up with the total, which every lane of head h then reads.
template <typename acc_t, typename Merge>
__device__ __forceinline__ void reduce_over_head_lanes(acc_t& a, acc_t& b, int lane, int heads, int groups,
                                                       const Merge& merge) {
  const int g = lane / heads;
  for (int off = 1; off < groups; off <<= 1) {
    const acc_t a2 = __shfl_down_sync(kFullWarpMask, a, off * heads);
    const acc_t b2 = __shfl_down_sync(kFullWarpMask, b, off * heads);
    if (g + off < groups) merge(a, b, a2, b2);
  }
  const int h = lane % heads;
  a = __shfl_sync(kFullWarpMask, a, h);
  b = __shfl_sync(kFullWarpMask, b, h);
}

// Returns whether row r has a well-formed edge range [lo, hi) (malformed rows are skipped).
__device__ __forceinline__ bool row_range(const int64_t* __restrict__ ptr, int64_t r, int64_t num_edges,
                                          int64_t& lo, int64_t& hi) {
  lo = ptr[r];
  hi = ptr[r + 1];
  return lo >= 0 && hi >= lo && hi <= num_edges;
}

// heads <= 32. Launch with kSoftmaxThreadsPerBlock threads, ceil(num_rows / warps) blocks.
template <typename scalar_t, typename acc_t>
__global__ void edge_softmax_warp_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                                         scalar_t* __restrict__ out, int64_t num_rows, int64_t num_edges,
                                         int heads) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSoftmaxWarpsPerBlock + (threadIdx.x >> 5);
  int64_t lo, hi;
  if (row >= num_rows || !row_range(ptr, row, num_edges, lo, hi)) return;  // uniform per warp
  const int groups = 32 / heads, width = groups * heads;
  const int64_t begin = lo * heads + lane, end = hi * heads;
  acc_t m = acc_t(0), s = acc_t(0);
  if (lane < width) {
    for (int64_t k = begin; k < end; k += width) {
      const acc_t v = static_cast<acc_t>(src[k]);
      if (s == acc_t(0)) {
        m = v;
        s = acc_t(1);
      } else if (v > m) {
        s = s * exp_acc(m - v) + acc_t(1);
        m = v;
      } else {
        s += exp_acc(v - m);
      }
    }
  }
  reduce_over_head_lanes(m, s, lane, heads, groups,
                         [](acc_t& a, acc_t& b, acc_t a2, acc_t b2) { online_merge(a, b, a2, b2); });
  const acc_t inv = acc_t(1) / (s + acc_t(1e-16));
  if (lane < width)
    for (int64_t k = begin; k < end; k += width)
      out[k] = static_cast<scalar_t>(exp_acc(static_cast<acc_t>(src[k]) - m) * inv);
}

template <typename scalar_t, typename acc_t>
__global__ void edge_softmax_backward_warp_kernel(const scalar_t* __restrict__ out,
                                                  const scalar_t* __restrict__ grad_out,
                                                  const int64_t* __restrict__ ptr,
                                                  scalar_t* __restrict__ grad_src, int64_t num_rows,
                                                  int64_t num_edges, int heads) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSoftmaxWarpsPerBlock + (threadIdx.x >> 5);
  int64_t lo, hi;
  if (row >= num_rows || !row_range(ptr, row, num_edges, lo, hi)) return;
  const int groups = 32 / heads, width = groups * heads;
  const int64_t begin = lo * heads + lane, end = hi * heads;
  acc_t dot = acc_t(0), unused = acc_t(0);
  if (lane < width)
    for (int64_t k = begin; k < end; k += width)
      dot += static_cast<acc_t>(out[k]) * static_cast<acc_t>(grad_out[k]);
  reduce_over_head_lanes(dot, unused, lane, heads, groups,
                         [](acc_t& a, acc_t&, acc_t a2, acc_t) { a += a2; });
  if (lane < width)
    for (int64_t k = begin; k < end; k += width)
      grad_src[k] = static_cast<scalar_t>(static_cast<acc_t>(out[k]) * (static_cast<acc_t>(grad_out[k]) - dot));
}

// Any number of heads: one thread per (row, head), sequential over the row's edges.
template <typename scalar_t, typename acc_t>
__global__ void edge_softmax_thread_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                                           scalar_t* __restrict__ out, int64_t num_rows, int64_t num_edges,
                                           int64_t heads) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t lo, hi;
  if (t >= num_rows * heads || !row_range(ptr, t / heads, num_edges, lo, hi)) return;
  const int64_t h = t % heads;
  acc_t m = acc_t(0), s = acc_t(0);
  for (int64_t e = lo; e < hi; ++e) online_merge(m, s, static_cast<acc_t>(src[e * heads + h]), acc_t(1));
  const acc_t inv = acc_t(1) / (s + acc_t(1e-16));
  for (int64_t e = lo; e < hi; ++e)
    out[e * heads + h] = static_cast<scalar_t>(exp_acc(static_cast<acc_t>(src[e * heads + h]) - m) * inv);
}

template <typename scalar_t, typename acc_t>
__global__ void edge_softmax_backward_thread_kernel(const scalar_t* __restrict__ out,
                                                    const scalar_t* __restrict__ grad_out,
                                                    const int64_t* __restrict__ ptr,
                                                    scalar_t* __restrict__ grad_src, int64_t num_rows,
                                                    int64_t num_edges, int64_t heads) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t lo, hi;
  if (t >= num_rows * heads || !row_range(ptr, t / heads, num_edges, lo, hi)) return;
  const int64_t h = t % heads;
  acc_t dot = acc_t(0);
  for (int64_t e = lo; e < hi; ++e)
    dot += static_cast<acc_t>(out[e * heads + h]) * static_cast<acc_t>(grad_out[e * heads + h]);
  for (int64_t e = lo; e < hi; ++e)
    grad_src[e * heads + h] = static_cast<scalar_t>(
        static_cast<acc_t>(out[e * heads + h]) * (static_cast<acc_t>(grad_out[e * heads + h]) - dot));
}

}  // namespace pyg_fast::cuda
