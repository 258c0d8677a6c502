// CUDA kernels of scatter_extremum (ops/scatter_extremum.cpp). Torch-free.
#pragma once

#include <cstdint>

#include "coo.cuh"

namespace pyg_fast::cuda {

constexpr int kScatterExtremumThreads = 256;

// One thread per value: acc[index[e], f] = max (min) with src[e, f], and seen[index[e]] = 1; a row
// whose index is out of range is skipped and raises flags[0].
template <typename scalar_t, typename acc_t, bool IS_MAX>
__global__ void scatter_extremum_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                                        int64_t num_values, int64_t features, int64_t num_rows,
                                        acc_t* __restrict__ acc, int* __restrict__ seen, int64_t* __restrict__ flags) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = coo_slot(index, i, features, num_rows);
    if (slot < 0) {
      flags[0] = 1;
      continue;
    }
    const acc_t v = static_cast<acc_t>(src[i]);
    if constexpr (IS_MAX) atomic_max_value(acc + slot, v);
    else atomic_min_value(acc + slot, v);
    if (slot % features == 0) seen[slot / features] = 1;
  }
}

// out[r, f] = acc[r, f] where segment r has a row, else 0.
template <typename scalar_t, typename acc_t>
__global__ void scatter_extremum_finish_kernel(const acc_t* __restrict__ acc, const int* __restrict__ seen,
                                               int64_t num_values, int64_t features, scalar_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = seen[i / features] ? static_cast<scalar_t>(acc[i]) : scalar_t(0);
}

}  // namespace pyg_fast::cuda
