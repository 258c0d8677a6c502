// Pieces shared by the segment kernels (segment_reduce.cuh lists the schedules): vector loads,
// the row sources, the folds over a lane's rows, group geometry and clamped segment bounds.
// Torch-free.
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
// Source indices are int64 or int32 (index_t): at small F the index is a large share of the bytes a
// weighted gather moves.
template <typename scalar_t, int VEC, bool WEIGHTED, typename index_t = int64_t>
struct GatheredRows {
  using scalar_type = scalar_t;
  static constexpr int kVec = VEC;
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

// Calls body(b, r, lo, hi) for every (batch, segment) pair the calling thread's group owns, one
// group per pair, with the segment's bounds clamped as above.
template <typename Body>
__device__ __forceinline__ void for_each_segment(Groups groups, const int64_t* __restrict__ ptr,
                                                 int64_t num_segments, int64_t batch, int64_t num_rows, Body&& body) {
  for (int64_t i = groups.first(); i < batch * num_segments; i += groups.stride()) {
    const int64_t b = i / num_segments, r = i - b * num_segments;
    int64_t lo, hi;
    segment_bounds(ptr, r, num_rows, lo, hi);
    body(b, r, lo, hi);
  }
}

}  // namespace pyg_fast::cuda
