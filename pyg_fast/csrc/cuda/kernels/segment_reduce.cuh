// CUDA kernels of the segment reduction family (segment_reduce, index_segment_reduce, SpMM).
// Torch-free: the bindings in ../segment_reduce.cu and ../index_segment_reduce.cu launch them.
//
// Output row r of batch b reduces the rows e in [ptr[r], ptr[r+1]) of a row source (`Rows`):
// the rows of src itself, or rows of x gathered through src_index and scaled by an edge weight.
// Threads form groups of `lanes` threads; each lane owns VEC consecutive features (one 16-byte
// load when VEC * sizeof(scalar_t) == 16), so a group covers lanes * VEC features per pass.
//
// Five schedules (chosen per input by pyg_fast/tuning); the last two read a per-graph layout:
//  * row:   one group per output row walks the whole segment (GeoT's sequential reduction
//           without atomics). Every output row is written exactly once, deterministic.
//  * row_parallel: one group per output row, but its lanes split the segment's rows (lane l
//           takes rows lo + l, lo + l + lanes, ...) and each lane holds VEC features; a
//           warp-shuffle tree combines the lanes (GeoT's parallel reduction). For small F,
//           where lanes over features would leave most of a warp idle or uncoalesced.
//  * chunk: one group per chunk of `chunk` consecutive rows of the source, whatever segments they
//           belong to, so long segments are split evenly (GeoT's work balance). Segments inside a
//           chunk are finished in place; a segment that crosses a chunk boundary leaves one
//           partial per chunk in a carry buffer, and segment_fixup_kernel combines those partials
//           (and writes the empty segments). Deterministic as well: no atomics.
//  * groups: GNNAdvisor's neighbour groups, see segment_groups_kernel.
//  * balanced: G-Sparse's degree-sorted rows with staged indices, see segment_balanced_kernel.
//  * edges: one warp per chunk of rows, lanes over consecutive rows (not features), for small F;
//           see segment_edges_kernel.
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "../../common/reduce.h"
#include "../../tuning/segment_schedule.h"

namespace pyg_fast::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// threadIdx.x and blockDim.x read where they are used. Addresses derived from the plain builtins may
// be computed once, above a kernel's main loop, and held in registers through it: in some builds
// NVVM did so for the groups kernel's VEC shared-memory addresses (8 more registers, 22% less
// occupancy, 15% slower SpMM at F = 128; which builds depended on unrelated code in the file).
// A volatile read cannot be moved, so such addresses are computed after the loop.
__device__ __forceinline__ unsigned opaque_thread_index() {
  unsigned value;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(value));
  return value;
}

__device__ __forceinline__ unsigned opaque_block_size() {
  unsigned value;
  asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(value));
  return value;
}

// Loads N consecutive values p[0..N) in 16-byte vectors where p is 16-byte aligned, else one by one.
// A lane that reads a run of consecutive values (the edges schedule) then issues N / (16 / sizeof(T))
// loads instead of N, each touching the same cache lines: fewer L1 wavefronts per value.
template <typename T, int N>
__device__ __forceinline__ void load_consecutive(const T* __restrict__ p, T (&out)[N]) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  static_assert(N % kPer == 0, "whole vectors only");
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N / kPer; ++i) {
      const Vec<T, kPer> v = reinterpret_cast<const Vec<T, kPer>*>(p)[i];
#pragma unroll
      for (int k = 0; k < kPer; ++k) out[i * kPer + k] = v.v[k];
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

// Rows of src [B, E, F] themselves.
template <typename scalar_t, int VEC>
struct DirectRows {
  using scalar_type = scalar_t;
  static constexpr int kVec = VEC;
  static constexpr bool kNarrowIndex = false;
  const scalar_t* __restrict__ src;
  int64_t num_rows, num_features;

  // Element offset of row e's first feature (-1 where the row is to be skipped).
  __device__ __forceinline__ int64_t offset(int64_t b, int64_t e) const { return (b * num_rows + e) * num_features; }
  __device__ __forceinline__ void load_at(int64_t offset, int64_t f0, Vec<scalar_t, VEC>& v) const {
    v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(src + offset + f0);
  }
  __device__ __forceinline__ bool load(int64_t b, int64_t e, int64_t f0, Vec<scalar_t, VEC>& v) const {
    load_at(offset(b, e), f0, v);
    return true;
  }
  template <typename acc_t>
  __device__ __forceinline__ acc_t scale(int64_t, int64_t) const { return acc_t(1); }
  static constexpr bool kScaled = false;

  // Rows e0 .. e0 + N - 1 (all of them exist). One-feature rows are consecutive values.
  template <typename acc_t, int N>
  __device__ __forceinline__ void load_run(int64_t b, int64_t e0, int64_t f0, Vec<scalar_t, VEC> (&v)[N],
                                           acc_t (&)[N], bool (&ok)[N]) const {
    if constexpr (VEC == 1) {
      if (num_features == 1) {
        scalar_t values[N];
        load_consecutive(src + b * num_rows + e0, values);
#pragma unroll
        for (int u = 0; u < N; ++u) v[u].v[0] = values[u];
#pragma unroll
        for (int u = 0; u < N; ++u) ok[u] = true;
        return;
      }
    }
#pragma unroll
    for (int u = 0; u < N; ++u) ok[u] = load(b, e0 + u, f0, v[u]);
  }
};

// Row e is x[src_index[e]] times weight[e, f0 / head_dim] (if weighted); x is [N, F].
// Out-of-range source indices are skipped (the Python layer reports them before launching).
// Source indices are int64, or int32 (index_t) for the edges and groups schedules: at small F the
// index is a large share of the bytes a weighted gather moves.
template <typename scalar_t, int VEC, bool WEIGHTED, typename index_t = int64_t>
struct GatheredRows {
  using scalar_type = scalar_t;
  static constexpr int kVec = VEC;
  static constexpr bool kNarrowIndex = sizeof(index_t) != sizeof(int64_t);  // edges and groups schedules only
  const scalar_t* __restrict__ x;
  const index_t* __restrict__ src_index;
  const scalar_t* __restrict__ weight;  // [E, num_heads], read only if WEIGHTED
  int64_t num_nodes, num_rows, num_features, num_heads, head_dim;

  __device__ __forceinline__ int64_t offset(int64_t, int64_t e) const {
    const int64_t j = src_index[e];
    return static_cast<uint64_t>(j) < static_cast<uint64_t>(num_nodes) ? j * num_features : int64_t(-1);
  }
  __device__ __forceinline__ void load_at(int64_t offset, int64_t f0, Vec<scalar_t, VEC>& v) const {
    v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(x + offset + f0);
  }
  __device__ __forceinline__ bool load(int64_t b, int64_t e, int64_t f0, Vec<scalar_t, VEC>& v) const {
    const int64_t o = offset(b, e);
    if (o < 0) return false;
    load_at(o, f0, v);
    return true;
  }
  template <typename acc_t>
  __device__ __forceinline__ acc_t scale(int64_t e, int64_t f0) const {
    if constexpr (!WEIGHTED) return acc_t(1);  // weight may be null
    else return static_cast<acc_t>(num_heads == 1 ? weight[e] : weight[e * num_heads + f0 / head_dim]);
  }
  static constexpr bool kScaled = WEIGHTED;

  // Rows e0 .. e0 + N - 1 (all of them exist) with their weights: the indices (and single-head
  // weights) are consecutive values, all loaded before the rows.
  template <typename acc_t, int N>
  __device__ __forceinline__ void load_run(int64_t b, int64_t e0, int64_t f0, Vec<scalar_t, VEC> (&v)[N],
                                           acc_t (&s)[N], bool (&ok)[N]) const {
    index_t j[N];
    load_consecutive(src_index + e0, j);
    if constexpr (WEIGHTED) {
      if (num_heads == 1) {
        scalar_t w[N];
        load_consecutive(weight + e0, w);
#pragma unroll
        for (int u = 0; u < N; ++u) s[u] = static_cast<acc_t>(w[u]);
      } else {
#pragma unroll
        for (int u = 0; u < N; ++u) s[u] = scale<acc_t>(e0 + u, f0);
      }
    }
#pragma unroll
    for (int u = 0; u < N; ++u) {
      ok[u] = static_cast<uint64_t>(static_cast<int64_t>(j[u])) < static_cast<uint64_t>(num_nodes);
      if (ok[u]) load_at(static_cast<int64_t>(j[u]) * num_features, f0, v[u]);
    }
  }
};

// Folds one loaded vector, scaled by s where the row source is weighted, into acc.
template <typename acc_t, Reduce R, bool SCALED, int VEC, typename scalar_t>
__device__ __forceinline__ void fold_vec(acc_t (&acc)[VEC], const Vec<scalar_t, VEC>& v, acc_t s) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const acc_t val = SCALED ? s * static_cast<acc_t>(v.v[k]) : static_cast<acc_t>(v.v[k]);
    acc[k] = Reducer<R, acc_t>::update(acc[k], val);
  }
}

// Rows of one lane's segment loaded per round (see fold_rows). On the H100 4 rows per
// round beat 16 for one-float vectors (F = 1: up to 1.4x slower at 16, more registers, lower
// occupancy); 16-byte vectors were measured at 4 rows only.
constexpr int kFoldUnroll = 4;

// Loads rows e, e + step, ... (kFoldUnroll of them, those below hi where PARTIAL) with their
// weights, all before any is used, then folds them in order.
template <bool PARTIAL, typename acc_t, Reduce R, int VEC, typename Rows>
__device__ __forceinline__ void fold_round(const Rows& rows, int64_t b, int64_t e, int64_t hi, int64_t f0,
                                           acc_t (&acc)[VEC], int64_t step) {
  using scalar_t = typename Rows::scalar_type;
  Vec<scalar_t, VEC> v[kFoldUnroll];
  acc_t s[kFoldUnroll];
  bool ok[kFoldUnroll];
#pragma unroll
  for (int u = 0; u < kFoldUnroll; ++u) {
    ok[u] = !PARTIAL || e + u * step < hi;
    if (ok[u]) {
      s[u] = rows.template scale<acc_t>(e + u * step, f0);
      ok[u] = rows.load(b, e + u * step, f0, v[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < kFoldUnroll; ++u)
    if (ok[u]) fold_vec<acc_t, R, Rows::kScaled>(acc, v[u], s[u]);
}

// Folds the rows lo, lo + step, ... < hi of one lane's VEC features into acc, in rounds of
// kFoldUnroll rows whose loads (and weights) are all issued before any is used. The last round is
// predicated rather than finished one row at a time, so a segment of up to kFoldUnroll rows costs
// one memory round trip (index, then rows) instead of one per leftover row; and the weights are
// read with the rows, not behind the validity test, which would add a third round trip.
// The rows are folded in order, so the result does not depend on the unroll.
template <typename acc_t, Reduce R, int VEC, typename Rows>
__device__ __forceinline__ void fold_rows(const Rows& rows, int64_t b, int64_t lo, int64_t hi,
                                          int64_t f0, acc_t (&acc)[VEC], int64_t step = 1) {
  int64_t e = lo;
  for (; e + (kFoldUnroll - 1) * step < hi; e += kFoldUnroll * step)
    fold_round<false, acc_t, R, VEC>(rows, b, e, hi, f0, acc, step);
  if (e < hi) fold_round<true, acc_t, R, VEC>(rows, b, e, hi, f0, acc, step);
}

template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__device__ __forceinline__ void store_final(scalar_t* dst, const acc_t (&acc)[VEC], int64_t count) {
  Vec<scalar_t, VEC> v;
#pragma unroll
  for (int k = 0; k < VEC; ++k) v.v[k] = static_cast<scalar_t>(Reducer<R, acc_t>::finalize(acc[k], count));
  *reinterpret_cast<Vec<scalar_t, VEC>*>(dst) = v;
}

template <typename acc_t, Reduce R, int VEC>
__device__ __forceinline__ void init_acc(acc_t (&acc)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = Reducer<R, acc_t>::init();
}

// Group geometry: `lanes` consecutive threads form a group; groups stride over `num_items`.
struct Groups {
  int lanes;
  __device__ __forceinline__ int lane() const { return threadIdx.x % lanes; }
  __device__ __forceinline__ int64_t first() const {
    return static_cast<int64_t>(blockIdx.x) * (blockDim.x / lanes) + threadIdx.x / lanes;
  }
  __device__ __forceinline__ int64_t stride() const {
    return static_cast<int64_t>(gridDim.x) * (blockDim.x / lanes);
  }
};

// Segment bounds clamped to the source rows, so that a bad ptr cannot cause an out-of-bounds read.
__device__ __forceinline__ void segment_bounds(const int64_t* __restrict__ ptr, int64_t r, int64_t num_rows,
                                               int64_t& lo, int64_t& hi) {
  lo = min(max(ptr[r], int64_t(0)), num_rows);
  hi = min(max(ptr[r + 1], lo), num_rows);
}

// Row schedule: out [B, V, F]; one group per (b, r).
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_rows_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                    Groups groups, Rows rows, scalar_t* __restrict__ out) {
  const int64_t F = rows.num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_segments; i += groups.stride()) {
    const int64_t b = i / num_segments, r = i - b * num_segments;
    int64_t lo, hi;
    segment_bounds(ptr, r, rows.num_rows, lo, hi);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, hi - lo);
    }
  }
}

// Row-parallel schedule: out [B, V, F]; one group per (b, r), lanes split the segment's rows.
// Groups of one warp loop in lockstep (inactive groups fold nothing) so the shuffles are safe.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_rows_parallel_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                             int64_t batch, Groups groups, Rows rows,
                                             scalar_t* __restrict__ out) {
  const int64_t F = rows.num_features, total = batch * num_segments;
  const int lane = groups.lane();
  const int64_t warp_first = groups.first() - (threadIdx.x % 32) / groups.lanes;
  for (int64_t base = warp_first; base < total; base += groups.stride()) {
    const int64_t i = base + (threadIdx.x % 32) / groups.lanes;
    const bool active = i < total;
    const int64_t b = active ? i / num_segments : 0, r = active ? i - b * num_segments : 0;
    int64_t lo = 0, hi = 0;
    if (active) segment_bounds(ptr, r, rows.num_rows, lo, hi);
    for (int64_t f0 = 0; f0 < F; f0 += VEC) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_rows<acc_t, R, VEC>(rows, b, lo + lane, hi, f0, acc, groups.lanes);
      for (int offset = groups.lanes / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          acc[k] = Reducer<R, acc_t>::update(acc[k], __shfl_xor_sync(kFullMask, acc[k], offset, groups.lanes));
      }
      if (active && lane == 0) store_final<scalar_t, acc_t, R, VEC>(out + i * F + f0, acc, hi - lo);
    }
  }
}

// Last r in [0, num_segments) with ptr[r] <= e (ptr non-decreasing).
__device__ __forceinline__ int64_t segment_of(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t e) {
  int64_t lo = 0, hi = num_segments;  // invariant: answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (ptr[mid] <= e) lo = mid; else hi = mid;
  }
  return lo;
}

// Chunk schedule, pass 1. Requires ptr[0] == 0 and ptr[V] == E (a COO index always gives that).
// carry is [B, num_chunks, 2, F] in acc_t: slot 0 holds the partial of the segment that contains
// the chunk's first row, slot 1 that of the segment containing its last row, each only when that
// segment is not wholly inside the chunk.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_chunks_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                      int64_t chunk, int64_t num_chunks, Groups groups, Rows rows,
                                      scalar_t* __restrict__ out, acc_t* __restrict__ carry) {
  const int64_t F = rows.num_features, E = rows.num_rows;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_chunks; i += groups.stride()) {
    const int64_t b = i / num_chunks, c = i - b * num_chunks;
    const int64_t e_begin = c * chunk, e_end = min(e_begin + chunk, E);
    const int64_t r_first = segment_of(ptr, num_segments, e_begin);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      for (int64_t r = r_first; r < num_segments; ++r) {
        const int64_t seg_lo = ptr[r], seg_hi = ptr[r + 1];
        if (seg_lo >= e_end) break;
        if (seg_hi <= seg_lo) continue;  // empty segments are written by the fixup pass
        const int64_t lo = max(seg_lo, e_begin), hi = min(seg_hi, e_end);
        acc_t acc[VEC];
        init_acc<acc_t, R, VEC>(acc);
        fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
        if (seg_lo >= e_begin && seg_hi <= e_end) {
          store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, seg_hi - seg_lo);
        } else {
          acc_t* slot = carry + ((b * num_chunks + c) * 2 + (r == r_first ? 0 : 1)) * F + f0;
#pragma unroll
          for (int k = 0; k < VEC; ++k) slot[k] = acc[k];
        }
      }
    }
  }
}

// Folds into acc the partials that chunks c0 .. c1 (c0 < c1) left in carry for one segment, at
// features f0 .. f0 + VEC of batch b, in chunk order: slot 1 of c0 when the segment starts inside
// c0, slot 0 everywhere else. Read from L2 (__ldcg): in the groups schedule other blocks of the same
// launch wrote them, and this SM's L1 may hold an older copy of their lines. UNROLL partials' loads
// are issued together: a segment over many chunks (a hub) then costs (c1 - c0 + 1) / UNROLL round
// trips to L2 rather than one per chunk, which bounds the fixup pass's time.
template <int UNROLL, typename acc_t, Reduce R, int VEC>
__device__ __forceinline__ void fold_carries(const acc_t* __restrict__ carry, int64_t b, int64_t num_chunks,
                                             int64_t F, int64_t f0, int64_t c0, int64_t c1, bool starts_inside,
                                             acc_t (&acc)[VEC]) {
  // Not unrolled: in the groups kernel's rare path (UNROLL 1), loads in flight cost the main loop's registers.
#pragma unroll 1
  for (int64_t c = c0; c <= c1; c += UNROLL) {
    acc_t part[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t chunk = c + u;
      const acc_t* slot = carry + ((b * num_chunks + chunk) * 2 + (chunk == c0 && starts_inside ? 1 : 0)) * F + f0;
#pragma unroll
      for (int k = 0; k < VEC; ++k) part[u][k] = chunk <= c1 ? __ldcg(slot + k) : acc_t(0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (c + u > c1) break;
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] = Reducer<R, acc_t>::update(acc[k], part[u][k]);
    }
  }
}

// Carries the fixup pass folds per round trip (see fold_carries).
constexpr int kFixupUnroll = 8;

// Pass 2 of the chunk and edges schedules: one group per segment; combines the carries of segments
// that cross chunk boundaries (chunks of `chunk` consecutive rows) and writes empty segments.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__global__ void segment_fixup_kernel(const int64_t* __restrict__ ptr, int64_t num_rows, int64_t num_segments,
                                     int64_t batch, int64_t num_features, int64_t chunk, int64_t num_chunks,
                                     Groups groups, const acc_t* __restrict__ carry, scalar_t* __restrict__ out) {
  const int64_t F = num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_segments; i += groups.stride()) {
    const int64_t b = i / num_segments, r = i - b * num_segments;
    int64_t lo, hi;
    segment_bounds(ptr, r, num_rows, lo, hi);
    const bool empty = hi <= lo;
    const int64_t c0 = empty ? 0 : lo / chunk, c1 = empty ? 0 : min((hi - 1) / chunk, num_chunks - 1);
    if (!empty && c0 == c1) continue;  // finished by its chunk
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      if (!empty) fold_carries<kFixupUnroll, acc_t, R, VEC>(carry, b, num_chunks, F, f0, c0, c1, lo != c0 * chunk, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, hi - lo);
    }
  }
}

// Edge-parallel schedule, pass 1 (GeoT's parallel reduction over the rows of many segments at
// once, for small F): one warp per chunk of `chunk` consecutive rows, whatever segments they belong
// to. The warp's lanes form 32 / lanes runs of `lanes` feature lanes (VEC features each); per step,
// run j walks kRunRows consecutive rows sequentially (their index and row loads issued together,
// contiguous per lane) and writes each segment that starts and ends inside it at once. What the run
// leaves open, the segment it starts in (its head) and the one it ends in (its tail), is combined
// across the warp's runs by one segmented scan per step keyed by segment, so a warp spends a few
// shuffles per run rather than per row, and no lane idles on a short segment (the row schedules give
// a short segment a whole group). The segment open at the end of a step carries into the next in
// registers; segments that cross a chunk leave partials in the chunk schedule's carry slots (same
// layout), which segment_fixup_kernel combines, as it writes the empty segments. Deterministic, no
// atomics. Requires ptr[0] == 0 and ptr[V] == E.
constexpr int kRunRows = 8;
// Threads per block of the edges schedule, at most (the launcher checks). One-value vectors hold
// 3 blocks per SM: at 256 threads, at most 85 registers, 24 warps to hide the run loads' latency.
constexpr int kEdgesMaxThreads = 256;
constexpr int edges_min_blocks(int vec) { return vec == 1 ? 3 : 1; }

// Last r in [0, num_segments) with ptr[r] <= e, searched by the whole warp: 31 probes a round, so
// about log32(V) dependent loads instead of log2(V). Every lane returns the same r.
__device__ __forceinline__ int64_t warp_segment_of(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t e,
                                                   int lane) {
  int64_t lo = 0, hi = num_segments;  // invariant: answer in [lo, hi)
  while (hi - lo > 1) {
    // Probes lo < p_0 <= ... <= p_30 < hi; ptr non-decreasing makes the true ones a prefix.
    const auto probe = [&](int j) { return lo + 1 + (hi - lo - 1) * j / 31; };
    const bool below = lane < 31 && ptr[probe(lane)] <= e;
    const int k = __popc(__ballot_sync(kFullMask, below));
    const int64_t new_lo = k > 0 ? probe(k - 1) : lo, new_hi = k < 31 ? probe(k) : hi;
    lo = new_lo;
    hi = new_hi;
  }
  return lo;
}

// Number of the 32 non-decreasing values `bound` (one per lane) that are <= e, for this lane's e.
// Every shuffle is executed by all lanes (a shuffle behind a lane-dependent condition is undefined).
__device__ __forceinline__ int warp_count_at_most(int64_t bound, int64_t e) {
  int count = 0;
#pragma unroll
  for (int step = 16; step > 0; step /= 2)
    if (__shfl_sync(kFullMask, bound, count + step - 1) <= e) count += step;
  const int64_t last = __shfl_sync(kFullMask, bound, kWarpSize - 1);
  return count == 31 && last <= e ? 32 : count;
}

template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void __launch_bounds__(kEdgesMaxThreads, edges_min_blocks(VEC)) segment_edges_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                     int64_t chunk, int64_t num_chunks, int lanes, Rows rows,
                                     scalar_t* __restrict__ out, acc_t* __restrict__ carry) {
  using Red = Reducer<R, acc_t>;
  const int lane = threadIdx.x % kWarpSize, feature_lane = lane % lanes, run = lane / lanes;
  const int runs = kWarpSize / lanes;
  const int last_run_lane = kWarpSize - lanes + feature_lane;  // this feature lane in the step's last run
  const int64_t F = rows.num_features, E = rows.num_rows, V = num_segments;
  const int64_t tile = static_cast<int64_t>(lanes) * VEC, step_rows = static_cast<int64_t>(runs) * kRunRows;
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t i = blockIdx.x * warps_per_block + threadIdx.x / kWarpSize; i < batch * num_chunks; i += warps) {
    const int64_t b = i / num_chunks, c = i - b * num_chunks;
    const int64_t e_begin = c * chunk, e_end = min(e_begin + chunk, E);
    const int64_t r_first = warp_segment_of(ptr, V, e_begin, lane);
    const bool first_inside = ptr[r_first] >= e_begin;  // r_first starts in this chunk
    for (int64_t f_base = 0; f_base < F; f_base += tile) {
      const int64_t f0 = f_base + static_cast<int64_t>(feature_lane) * VEC;
      const bool has_f = f0 < F;
      int64_t r_open = r_first;  // the segment open before the step (r_first at the chunk's start)
      acc_t open[VEC];           // its partial over this chunk's rows so far
      init_acc<acc_t, R, VEC>(open);
      for (int64_t base = e_begin; base < e_end; base += step_rows) {
        // Runs past the chunk's end are empty and sit at e_end, so the segment keys stay sorted.
        const int64_t run_lo = min(base + run * kRunRows, e_end), run_hi = min(run_lo + kRunRows, e_end);
        Vec<scalar_t, VEC> v[kRunRows];
        acc_t s[kRunRows];
        bool ok[kRunRows];
        if (has_f && run_hi - run_lo == kRunRows) {
          rows.template load_run<acc_t>(b, run_lo, f0, v, s, ok);
        } else {
#pragma unroll
          for (int u = 0; u < kRunRows; ++u) {
            ok[u] = has_f && run_lo + u < run_hi;
            if (ok[u]) {
              s[u] = rows.template scale<acc_t>(run_lo + u, f0);
              ok[u] = rows.load(b, run_lo + u, f0, v[u]);
            }
          }
        }
        // The run's head: r_open plus the boundaries ptr[k] <= run_lo after it, 32 at a time.
        // Segment V stands for "past the last row" (run_lo == E).
        const int64_t step_last = min(base + (runs - 1) * kRunRows, e_end);
        int64_t head = r_open;
        for (int64_t k0 = r_open + 1; k0 <= V; k0 += kWarpSize) {
          const int64_t bound = k0 + lane <= V ? ptr[k0 + lane] : INT64_MAX;
          head += warp_count_at_most(bound, run_lo);
          if (__shfl_sync(kFullMask, bound, kWarpSize - 1) > step_last) break;
        }
        // Walk the run: r is the open segment, [r_lo, r_hi) its rows (r_lo unknown for the head).
        acc_t acc[VEC], head_acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] = run == 0 && head == r_open ? open[k] : Red::init();
        bool head_open = true;
        int64_t r = head, r_lo = 0, r_hi = head < V ? ptr[head + 1] : E;
#pragma unroll
        for (int u = 0; u < kRunRows; ++u) {
          const int64_t e = run_lo + u;
          if (e >= run_hi) break;
          if (ok[u]) fold_vec<acc_t, R, Rows::kScaled>(acc, v[u], s[u]);
          while (r < V && e + 1 >= r_hi) {  // segment r ends with row e (or is empty)
            if (head_open) {
#pragma unroll
              for (int k = 0; k < VEC; ++k) head_acc[k] = acc[k];
              head_open = false;
            } else if (r_hi > r_lo && has_f) {  // started and ended in this run; empty ones: fixup
              store_final<scalar_t, acc_t, R, VEC>(out + (b * V + r) * F + f0, acc, r_hi - r_lo);
            }
            init_acc<acc_t, R, VEC>(acc);
            ++r;
            r_lo = r_hi;
            r_hi = r < V ? ptr[r + 1] : r_lo;
          }
        }
        // Segmented inclusive scan of the tails over the runs: each run ends with its tail segment's
        // rows from this chunk up to its own end.
        for (int d = 1; d < runs; d *= 2) {
          const int64_t other_r = __shfl_up_sync(kFullMask, r, d * lanes);
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const acc_t other = __shfl_up_sync(kFullMask, acc[k], d * lanes);
            if (run >= d && other_r == r) acc[k] = Red::update(other, acc[k]);
          }
        }
        // A head that ended here gets the previous run's tail when that is the same segment.
        const int64_t prev_r = __shfl_up_sync(kFullMask, r, lanes);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const acc_t prev = __shfl_up_sync(kFullMask, acc[k], lanes);
          if (!head_open && run > 0 && prev_r == head) head_acc[k] = Red::update(prev, head_acc[k]);
        }
        if (!head_open && has_f) {
          if (head != r_first || first_inside) {
            store_final<scalar_t, acc_t, R, VEC>(out + (b * V + head) * F + f0, head_acc,
                                                 ptr[head + 1] - ptr[head]);
          } else {  // r_first began before the chunk: slot 0
            acc_t* slot = carry + (b * num_chunks + c) * 2 * F + f0;
#pragma unroll
            for (int k = 0; k < VEC; ++k) slot[k] = head_acc[k];
          }
        }
        r_open = __shfl_sync(kFullMask, r, last_run_lane);
#pragma unroll
        for (int k = 0; k < VEC; ++k) open[k] = __shfl_sync(kFullMask, acc[k], last_run_lane);
      }
      // The segment still open at the chunk's end crosses into the next chunk (unless it starts
      // there): slot 0 if it is also the chunk's first segment, else slot 1.
      if (has_f && r_open < V && ptr[r_open] < e_end) {
        acc_t* slot = carry + ((b * num_chunks + c) * 2 + (r_open == r_first ? 0 : 1)) * F + f0;
#pragma unroll
        for (int k = 0; k < VEC; ++k) slot[k] = open[k];
      }
    }
  }
}

// The groups schedule's end for a segment r whose groups span blocks c0 .. c1, called by the group
// that led r in this block once the block's partials of r are written (for every b and feature):
// counts the block in, and the last of the (c1 - c0 + 1) * gridDim.y blocks to arrive combines the
// partials and resets the counter. Not inlined: the kernel's main loop then keeps its registers
// (and occupancy), which this rare path would otherwise raise.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__device__ __noinline__ void finish_spanning_segment(const int64_t* __restrict__ group_ptr, int64_t r, int64_t count,
                                                     int64_t num_segments, int64_t batch, int64_t F, int lanes,
                                                     const acc_t* __restrict__ carry, scalar_t* __restrict__ out,
                                                     unsigned* __restrict__ arrivals) {
  const int per_block = blockDim.x / lanes, lane = threadIdx.x % lanes;
  const int64_t span_first = group_ptr[r], c0 = span_first / per_block, c1 = (group_ptr[r + 1] - 1) / per_block;
  const int warp_lane = threadIdx.x % kWarpSize;
  const unsigned group_mask =
      lanes == kWarpSize ? kFullMask : ((1u << lanes) - 1u) << (warp_lane - lane);  // this group's lanes
  // The group's carry stores happen before lane 0's release (the warp barrier orders them, the
  // release is cumulative); the last arrival's acquire happens before the group's loads. Lighter
  // than a full __threadfence around the count.
  __syncwarp(group_mask);
  unsigned arrived = 0;
  if (lane == 0)
    arrived = ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device>(arrivals[c0]).fetch_add(
                  1u, ::cuda::std::memory_order_acq_rel) + 1u;
  arrived = __shfl_sync(group_mask, arrived, 0, lanes);
  if (arrived != static_cast<unsigned>((c1 - c0 + 1) * gridDim.y)) return;
  __syncwarp(group_mask);
  const int64_t tile = static_cast<int64_t>(lanes) * VEC;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f0 = static_cast<int64_t>(lane) * VEC; f0 < F; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_carries<1, acc_t, R, VEC>(carry, b, gridDim.x, F, f0, c0, c1, span_first != c0 * per_block, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, count);
    }
  }
  if (lane == 0) arrivals[c0] = 0;
}

// Neighbour-group schedule (GNNAdvisor), one launch. The layout (built once per graph by
// pyg_fast/ops/_layout.py) cuts every segment into groups of at most `group_size` consecutive rows,
// packed in segment order, an empty segment into one group of no rows: group g covers rows
// [group_start[g], group_start[g + 1]) of segment group_segment[g], and segment r owns groups
// [group_ptr[r], group_ptr[r + 1]). Long segments are split over many groups and short ones share a
// block, so the work per group is bounded.
// A block takes blockDim.x / lanes consecutive groups, each served by `lanes` dimension workers
// (consecutive VEC-wide features, coalesced). Each group folds its rows in registers and leaves its
// partial in shared memory; the leader (the segment's first group in the block) combines the
// partials and writes the segment once, without atomics; empty segments are written by their own
// group. A segment whose groups span blocks leaves one partial per block in carry [B, num_blocks, 2,
// F] instead (slot 0 when it is the block's first segment, else slot 1); each of its blocks then
// counts itself in arrivals[its first block], and the last to arrive combines the partials in block
// order and resets the counter to 0 (so the next launch finds it zeroed): deterministic, valid for
// every reduction, and no second pass over the segments. All loops around __syncthreads are
// block-uniform.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_groups_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ group_ptr,
                                      const int64_t* __restrict__ group_start,
                                      const int64_t* __restrict__ group_segment, int64_t num_segments,
                                      int64_t num_groups, int64_t batch, int lanes, Rows rows,
                                      scalar_t* __restrict__ out, acc_t* __restrict__ carry,
                                      unsigned* __restrict__ arrivals) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  // partial[k * threads + thread]: feature k of the thread's vector (conflict-free).
  acc_t* partial = reinterpret_cast<acc_t*>(shared_bytes);
  const int64_t F = rows.num_features, E = rows.num_rows, tile = static_cast<int64_t>(lanes) * VEC;
  const int per_block = blockDim.x / lanes, slot = threadIdx.x / lanes, lane = threadIdx.x % lanes;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * per_block, num_blocks = gridDim.x;
  const int in_block = static_cast<int>(min(static_cast<int64_t>(per_block), num_groups - first));
  const int64_t g = first + slot;
  int64_t lo = 0, hi = 0, r = -1;
  if (slot < in_block) {
    lo = min(max(group_start[g], int64_t(0)), E);
    hi = min(max(group_start[g + 1], lo), E);
    r = group_segment[g];
  }
  const bool valid = 0 <= r && r < num_segments;
  const bool leader = valid && (slot == 0 || group_segment[g - 1] != r);
  int run = 0;  // the leader's segment has groups slot .. slot + run - 1 in this block
  if (leader)
    while (slot + run < in_block && group_segment[g + run] == r) ++run;
  const bool whole = leader && group_ptr[r] >= first && group_ptr[r + 1] <= first + in_block;
  const int carry_slot = leader && group_ptr[r] <= first ? 0 : 1;
  int64_t seg_lo = 0, seg_hi = 0;
  if (leader) segment_bounds(ptr, r, E, seg_lo, seg_hi);
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    for (int64_t base = 0; base < F; base += tile) {
      const int64_t f0 = base + static_cast<int64_t>(lane) * VEC;
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      if (valid && f0 < F) fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
      const unsigned thread = opaque_thread_index(), threads = opaque_block_size();
#pragma unroll
      for (int k = 0; k < VEC; ++k) partial[k * threads + thread] = acc[k];
      __syncthreads();
      if (leader && f0 < F) {
        for (int j = 1; j < run; ++j) {
#pragma unroll
          for (int k = 0; k < VEC; ++k)
            acc[k] = Reducer<R, acc_t>::update(acc[k], partial[k * threads + thread + j * lanes]);
        }
        if (whole) {
          store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, seg_hi - seg_lo);
        } else {
          acc_t* dst = carry + ((b * num_blocks + blockIdx.x) * 2 + carry_slot) * F + f0;
#pragma unroll
          for (int k = 0; k < VEC; ++k) dst[k] = acc[k];
        }
      }
      __syncthreads();
    }
  }
  if (leader && !whole)
    finish_spanning_segment<scalar_t, acc_t, R, VEC>(group_ptr, r, seg_hi - seg_lo, num_segments, batch, F, lanes,
                                                     carry, out, arrivals);
}

// Balanced-rows schedule (G-Sparse). One warp per segment, segments taken in the order row_order
// (by decreasing length, built once per graph), so the warps of a block carry similar work and the
// longest segments start first. A warp is `lanes` feature lanes times 32 / lanes edge lanes. It walks
// its segment in tiles of 32 rows: each lane stages one row's source offset (and a single-head
// weight) in shared memory with one coalesced load, then edge lane s folds rows s, s + 32 / lanes, ...
// of the tile. Each thread holds kBalancedTile output vectors strided by lanes * VEC features (1-D
// strided register tiling), so one walk over the rows covers kBalancedTile * lanes * VEC features; a
// shuffle tree over the edge lanes combines them. Each segment is written once: deterministic.
using tuning::kBalancedTile;
constexpr int kMaxWarpsPerBlock = 32;

// Folds UNROLL staged rows t, t + step, ... into the kBalancedTile vectors of acc.
template <int UNROLL, typename acc_t, Reduce R, int VEC, typename Rows>
__device__ __forceinline__ void fold_staged_rows(const Rows& rows, const int64_t* staged_offset,
                                                 const acc_t* staged_weight, bool staged_scale, int t, int step,
                                                 int64_t e0, int64_t f_first, int64_t f_stride,
                                                 acc_t (&acc)[kBalancedTile][VEC]) {
  using scalar_t = typename Rows::scalar_type;
  const int64_t F = rows.num_features;
  Vec<scalar_t, VEC> v[UNROLL][kBalancedTile];
  int64_t o[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    o[u] = staged_offset[t + u * step];
#pragma unroll
    for (int k = 0; k < kBalancedTile; ++k)
      if (o[u] >= 0 && f_first + k * f_stride < F) rows.load_at(o[u], f_first + k * f_stride, v[u][k]);
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (o[u] < 0) continue;
#pragma unroll
    for (int k = 0; k < kBalancedTile; ++k) {
      const int64_t f = f_first + k * f_stride;
      if (f >= F) continue;
      const acc_t s = staged_scale ? staged_weight[t + u * step]
                                   : rows.template scale<acc_t>(e0 + t + u * step, f);
      fold_vec<acc_t, R, Rows::kScaled>(acc[k], v[u][k], s);
    }
  }
}

template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_balanced_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ row_order,
                                        int64_t num_segments, int64_t batch, int lanes, Rows rows,
                                        scalar_t* __restrict__ out) {
  __shared__ int64_t staged_offset[kMaxWarpsPerBlock][kWarpSize];
  __shared__ acc_t staged_weight[kMaxWarpsPerBlock][kWarpSize];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int feature_lane = lane % lanes, edge_lane = lane / lanes, edge_lanes = kWarpSize / lanes;
  const int64_t F = rows.num_features, E = rows.num_rows, f_stride = static_cast<int64_t>(lanes) * VEC;
  bool staged_scale = false;
  if constexpr (Rows::kScaled) staged_scale = rows.num_heads == 1;
  const int64_t warps_per_block = blockDim.x / kWarpSize, warps = gridDim.x * warps_per_block;
  for (int64_t i = blockIdx.x * warps_per_block + warp; i < batch * num_segments; i += warps) {
    const int64_t b = i / num_segments, r = row_order[i - b * num_segments];
    if (r < 0 || r >= num_segments) continue;  // the whole warp shares i: uniform
    int64_t lo, hi;
    segment_bounds(ptr, r, E, lo, hi);
    for (int64_t base = 0; base < F; base += f_stride * kBalancedTile) {
      const int64_t f_first = base + static_cast<int64_t>(feature_lane) * VEC;
      acc_t acc[kBalancedTile][VEC];
#pragma unroll
      for (int k = 0; k < kBalancedTile; ++k) init_acc<acc_t, R, VEC>(acc[k]);
      for (int64_t e0 = lo; e0 < hi; e0 += kWarpSize) {
        const int n = static_cast<int>(min(static_cast<int64_t>(kWarpSize), hi - e0));
        __syncwarp();  // the previous tile has been read
        if (lane < n) {
          staged_offset[warp][lane] = rows.offset(b, e0 + lane);
          if (staged_scale) staged_weight[warp][lane] = rows.template scale<acc_t>(e0 + lane, 0);
        }
        __syncwarp();
        int t = edge_lane;
        for (; t + 3 * edge_lanes < n; t += 4 * edge_lanes)
          fold_staged_rows<4, acc_t, R, VEC>(rows, staged_offset[warp], staged_weight[warp], staged_scale, t,
                                             edge_lanes, e0, f_first, f_stride, acc);
        for (; t < n; t += edge_lanes)
          fold_staged_rows<1, acc_t, R, VEC>(rows, staged_offset[warp], staged_weight[warp], staged_scale, t,
                                             edge_lanes, e0, f_first, f_stride, acc);
      }
      for (int offset = lanes; offset < kWarpSize; offset *= 2) {
#pragma unroll
        for (int k = 0; k < kBalancedTile; ++k) {
#pragma unroll
          for (int j = 0; j < VEC; ++j)
            acc[k][j] = Reducer<R, acc_t>::update(acc[k][j], __shfl_xor_sync(kFullMask, acc[k][j], offset));
        }
      }
      if (edge_lane == 0) {
#pragma unroll
        for (int k = 0; k < kBalancedTile; ++k) {
          const int64_t f = f_first + k * f_stride;
          if (f < F) store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f, acc[k], hi - lo);
        }
      }
    }
  }
}

// Gradient of sum/mean segment_reduce w.r.t. src [B, E, F]: every row of a segment gets the
// segment's grad_out (divided by the count for mean). Rows outside every segment are left alone.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__global__ void segment_spread_backward_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                               int64_t batch, int64_t num_rows, int64_t num_features,
                                               Groups groups, const scalar_t* __restrict__ grad_out,
                                               scalar_t* __restrict__ grad_src) {
  const int64_t F = num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_segments; i += groups.stride()) {
    const int64_t b = i / num_segments, r = i - b * num_segments;
    int64_t lo, hi;
    segment_bounds(ptr, r, num_rows, lo, hi);
    const acc_t inv = R == Reduce::Mean && hi > lo ? acc_t(1) / acc_t(hi - lo) : acc_t(1);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      const Vec<scalar_t, VEC> g =
          *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + (b * num_segments + r) * F + f0);
      Vec<scalar_t, VEC> w;
#pragma unroll
      for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(g.v[k]) * inv);
      for (int64_t e = lo; e < hi; ++e)
        *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_src + (b * num_rows + e) * F + f0) = w;
    }
  }
}

// Gradient of max/min w.r.t. every row (message) of a segment, [B, E, F]: grad_out goes to the
// rows that round to the stored extremum, split evenly among ties; other entries are left alone
// (the caller zero-fills). Works for both row sources (direct rows and weighted gathers).
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
__global__ void segment_extremum_backward_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                                 int64_t batch, Groups groups, Rows rows,
                                                 const scalar_t* __restrict__ grad_out,
                                                 const scalar_t* __restrict__ out,
                                                 scalar_t* __restrict__ grad_rows) {
  const int64_t F = rows.num_features, E = rows.num_rows;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_segments; i += groups.stride()) {
    const int64_t b = i / num_segments, r = i - b * num_segments;
    int64_t lo, hi;
    segment_bounds(ptr, r, E, lo, hi);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      const int64_t o = (b * num_segments + r) * F + f0;
      const Vec<scalar_t, VEC> g = *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + o);
      const Vec<scalar_t, VEC> best = *reinterpret_cast<const Vec<scalar_t, VEC>*>(out + o);
      // The message as the forward pass saw it, rounded to scalar_t like the stored output.
      auto message = [&](int64_t e, Vec<scalar_t, VEC>& m) {
        Vec<scalar_t, VEC> v;
        if (!rows.load(b, e, f0, v)) return false;
        const acc_t s = rows.template scale<acc_t>(e, f0);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          m.v[k] = Rows::kScaled ? static_cast<scalar_t>(s * static_cast<acc_t>(v.v[k])) : v.v[k];
        return true;
      };
      acc_t ties[VEC] = {};
      for (int64_t e = lo; e < hi; ++e) {
        Vec<scalar_t, VEC> m;
        if (!message(e, m)) continue;
#pragma unroll
        for (int k = 0; k < VEC; ++k) ties[k] += static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k]) ? acc_t(1) : acc_t(0);
      }
      acc_t share[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) share[k] = ties[k] > 0 ? static_cast<acc_t>(g.v[k]) / ties[k] : acc_t(0);
      for (int64_t e = lo; e < hi; ++e) {
        Vec<scalar_t, VEC> m, w;
        if (!message(e, m)) continue;
#pragma unroll
        for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k]) ? share[k] : acc_t(0));
        *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_rows + (b * E + e) * F + f0) = w;
      }
    }
  }
}

}  // namespace pyg_fast::cuda
