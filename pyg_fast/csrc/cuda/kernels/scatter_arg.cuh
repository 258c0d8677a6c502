// The CUDA kernel of scatter_arg (binding: ../scatter_arg.cu). Torch-free.
#pragma once

#include <cstdint>

#include "../../common/segment_arg_reduce.h"

namespace pyg_fast::cuda {

constexpr int kScatterArgThreads = 256;

// Feature lanes of a block row: F rounded up to a power of two, at most a warp (segment_arg_reduce's
// row kernel too).
inline int arg_feature_lanes(int64_t F) {
  int lanes = 1;
  while (lanes < F && lanes < 32) lanes *= 2;
  return lanes;
}

// Blocks of (lanes features) x (kScatterArgThreads / lanes rows), rows grid-strided, b over
// gridDim.y: coalesced rows, no sort, no per-segment walk, no integer division per value (a
// thread per value splitting its flat position took 2.96 ms on 23 M edges at F = 16 with the
// extremum pass, this 2.75; H100). A match takes the smallest row with an atomic. The
// per-segment walk it replaces waited on its longest segment (same graph: 12.4 ms, torch_scatter
// 4.6 ms).
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kScatterArgThreads)
    scatter_arg_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                       const scalar_t* __restrict__ out, int64_t B, int64_t E, int64_t V, int64_t F,
                       unsigned long long* __restrict__ arg) {
  const int64_t rows_per_step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y; j < E; j += rows_per_step) {
      const int64_t v = index[j];
      if (v < 0 || v >= V) continue;
      const scalar_t* row = src + (b * E + j) * F;
      const int64_t o = (b * V + v) * F;
      for (int64_t f = threadIdx.x; f < F; f += blockDim.x) {
        const acc_t value = static_cast<acc_t>(row[f]), best = static_cast<acc_t>(out[o + f]);
        if (holds_extremum(value, best)) {
          atomicMin(arg + o + f, static_cast<unsigned long long>(j));
        }
      }
    }
  }
}

}  // namespace pyg_fast::cuda
