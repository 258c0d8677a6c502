// CUDA kernels of scatter_extremum (ops/scatter_extremum.cpp). Torch-free.
#pragma once

#include <cstdint>

#include "coo.cuh"
#include "segment_common.cuh"

namespace pyg_fast::cuda {

constexpr int kScatterExtremumThreads = 256;

// 2^lanes_log2 threads per row of src, VEC values each per step: acc[index[e]] = max (min) with
// src[e], and seen[index[e]] = 1. A row whose index is out of range is skipped and raises flags[0].
// A thread per row and lane rather than per value: the index is read once per row and no value
// pays a 64-bit division for its row and feature.
template <typename scalar_t, typename acc_t, int VEC, bool IS_MAX>
__global__ void __launch_bounds__(kScatterExtremumThreads) scatter_extremum_kernel(
    const scalar_t* __restrict__ src, const int64_t* __restrict__ index, int64_t num_src_rows, int64_t features,
    int64_t num_rows, int lanes_log2, acc_t* __restrict__ acc, int64_t* __restrict__ seen, int64_t* __restrict__ flags) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t e = t >> lanes_log2;
  if (e >= num_src_rows) return;
  const int lane = static_cast<int>(t & ((int64_t{1} << lanes_log2) - 1));
  const int64_t d = index[e];
  if (static_cast<uint64_t>(d) >= static_cast<uint64_t>(num_rows)) {
    if (lane == 0) flags[0] = 1;
    return;
  }
  if (lane == 0) seen[d] = 1;
  const scalar_t* row = src + e * features;
  acc_t* target = acc + d * features;
  for (int64_t f = static_cast<int64_t>(lane) * VEC; f < features; f += static_cast<int64_t>(VEC) << lanes_log2) {
    const Vec<scalar_t, VEC> v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(row + f);
    // the targets read as one vector (acc rows start aligned and F % VEC == 0), not one scalar load
    // per value before its atomic: 1.17 M rows into 169 k, F = 16 / 64, H100: 0.139 -> 0.107 ms,
    // 0.558 -> 0.358 ms
    const Vec<acc_t, VEC> seen_values = *reinterpret_cast<const Vec<acc_t, VEC>*>(target + f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const auto value = static_cast<acc_t>(v.v[k]);
      if (may_move<IS_MAX>(seen_values.v[k], value)) atomic_extremum<IS_MAX>(target + f + k, value);
    }
  }
}

// out[r, f] = acc[r, f] where segment r has a row, else 0. Threads x along a row's features,
// threads y over rows (rows_grid in coo_launch.cuh). Where acc is out itself (float32 and float64
// accumulate in place), only the empty segments are written: at 169 k rows x 64 features (H100)
// the pass over every value took 55 us.
template <typename scalar_t, typename acc_t>
__global__ void scatter_extremum_finish_kernel(const acc_t* acc, const int64_t* __restrict__ seen,
                                               int64_t num_rows, int64_t features, scalar_t* out) {
  const bool in_place = static_cast<const void*>(acc) == static_cast<const void*>(out);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < num_rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const bool has_rows = seen[r] != 0;
    if (has_rows && in_place) continue;
    const int64_t base = r * features;
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x)
      out[base + f] = has_rows ? static_cast<scalar_t>(acc[base + f]) : scalar_t(0);
  }
}

}  // namespace pyg_fast::cuda
