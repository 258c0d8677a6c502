// The COO gather-scatter (ops/gather_scatter.cpp): the first uses of an index, where grouping
// its edges by destination would cost more than the reduction. Torch-free.
#pragma once

#include <cstdint>

#include "segment_common.cuh"

namespace pyg_fast::cuda {

constexpr int kGatherScatterThreads = 256;

// Adds VEC values to p (aligned to VEC values). sm_90 adds two or four floats in one atomic:
// a quarter of the atomic instructions of a 16-value row.
template <int VEC>
__device__ __forceinline__ void atomic_add_values(float* p, const float (&v)[VEC]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (VEC == 4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else if constexpr (VEC == 2) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));
  } else {
    atomicAdd(p, v[0]);
  }
#else
#pragma unroll
  for (int k = 0; k < VEC; ++k) atomicAdd(p + k, v[k]);
#endif
}

template <int VEC>
__device__ __forceinline__ void atomic_add_values(double* p, const double (&v)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) atomicAdd(p + k, v[k]);
}

// An edge's ends checked: whether both lie in range; a lane-0 thread raises the flag of each that
// does not (flags == nullptr: the caller checked them, none are raised).
__device__ __forceinline__ bool gather_scatter_edge_ok(int64_t s, int64_t d, int64_t num_src, int64_t num_dst,
                                                       bool report, int64_t* __restrict__ flags) {
  const bool src_ok = static_cast<uint64_t>(s) < static_cast<uint64_t>(num_src);
  const bool dst_ok = static_cast<uint64_t>(d) < static_cast<uint64_t>(num_dst);
  if (report && flags != nullptr && !(src_ok && dst_ok)) {
    if (!src_ok) flags[0] = 1;
    if (!dst_ok) flags[1] = 1;
  }
  return src_ok && dst_ok;
}

// Every edge's ends checked (flags raised), and a mean's edge counts made before its sums:
// count[dst[e]] += 1 for every edge with both ends in range (src == nullptr: row e; count ==
// nullptr: a call without features, which checks only). A thread an edge, grid-striding.
__global__ void __launch_bounds__(kGatherScatterThreads) gather_scatter_count_kernel(
    const int64_t* __restrict__ src, const int64_t* __restrict__ dst, int64_t num_src, int64_t num_dst,
    int64_t num_edges, unsigned long long* __restrict__ count, int64_t* __restrict__ flags) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = dst[e];
    if (gather_scatter_edge_ok(src == nullptr ? e : src[e], d, num_src, num_dst, true, flags) && count != nullptr)
      atomicAdd(count + d, 1ull);
  }
}

// 2^lanes_log2 threads per edge, VEC features each per step: out[dst[e]] += weight[e, h] *
// x[src[e]] (src == nullptr: x[e]), divided by count[dst[e]] (at least 1) where a mean's complete
// `count` is given: each value is divided before its add, so that no pass over the sums divides
// them after (a fresh mean of 1.17 M rows of 64 floats into 169 k: 282 -> 240 us, H200), and
// `divisor` [num_dst] gets the divisors. An edge with an end out of range is skipped and raises its flag.
template <typename scalar_t, typename acc_t, int VEC, bool WEIGHTED>
__global__ void __launch_bounds__(kGatherScatterThreads) gather_scatter_kernel(
    const scalar_t* __restrict__ x, const int64_t* __restrict__ src, const int64_t* __restrict__ dst,
    const scalar_t* __restrict__ weight, int64_t num_src, int64_t num_dst, int64_t num_edges, int64_t features,
    int64_t heads, int lanes_log2, acc_t* __restrict__ out, const unsigned long long* __restrict__ count,
    scalar_t* __restrict__ divisor, int64_t* __restrict__ flags) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (count != nullptr) {
    for (int64_t r = t; r < num_dst; r += static_cast<int64_t>(gridDim.x) * blockDim.x)
      divisor[r] = static_cast<scalar_t>(count[r] > 1 ? count[r] : 1ull);
  }
  const int64_t e = t >> lanes_log2;
  if (e >= num_edges) return;
  const int lane = static_cast<int>(t & ((int64_t{1} << lanes_log2) - 1));
  const int64_t s = src == nullptr ? e : src[e], d = dst[e];
  if (!gather_scatter_edge_ok(s, d, num_src, num_dst, lane == 0, flags)) return;
  const int64_t head_dim = features / heads;
  const scalar_t* row = x + s * features;
  acc_t* target = out + d * features;
  const acc_t scale = count == nullptr ? acc_t(1) : acc_t(1) / static_cast<acc_t>(count[d] > 1 ? count[d] : 1ull);
  for (int64_t f = static_cast<int64_t>(lane) * VEC; f < features; f += static_cast<int64_t>(VEC) << lanes_log2) {
    const Vec<scalar_t, VEC> v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(row + f);
    const acc_t w = WEIGHTED ? static_cast<acc_t>(weight[e * heads + f / head_dim]) * scale : scale;
    acc_t a[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) a[k] = w * static_cast<acc_t>(v.v[k]);
    atomic_add_values<VEC>(target + f, a);
  }
}

// out = acc in scalar_t (half types sum in float). Threads x along a row's features, threads y
// over rows (rows_grid in coo_launch.cuh).
template <typename scalar_t, typename acc_t>
__global__ void gather_scatter_finish_kernel(const acc_t* __restrict__ acc, int64_t num_rows, int64_t features,
                                             scalar_t* __restrict__ out) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < num_rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t base = r * features;
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) out[base + f] = static_cast<scalar_t>(acc[base + f]);
  }
}

}  // namespace pyg_fast::cuda
