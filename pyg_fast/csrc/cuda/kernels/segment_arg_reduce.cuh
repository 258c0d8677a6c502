// The CUDA kernel of segment_arg_reduce (binding: ../segment_arg_reduce.cu). Torch-free.
#pragma once

#include <cstdint>

#include "../../common/segment_arg_reduce.h"

namespace pyg_fast::cuda {

constexpr int kArgReduceThreads = 256;

// A thread per output element, features fastest: the threads of a segment read its rows
// contiguously. torch_scatter's own scatter_max makes two passes with atomics.
template <ArgReduce R, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kArgReduceThreads)
    segment_arg_reduce_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                              const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                              scalar_t* __restrict__ out, int64_t* __restrict__ arg) {
  const int64_t total = B * V * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t f = i % F, row = i / F, r = row % V, b = row / V;
    segment_arg_reduce_one<R, scalar_t, acc_t>(src + b * E * F + f, F, perm, ptr[r], ptr[r + 1], E, out + i,
                                               arg ? arg + i : nullptr);
  }
}

}  // namespace pyg_fast::cuda
