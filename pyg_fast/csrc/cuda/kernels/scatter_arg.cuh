// The CUDA kernel of scatter_arg (binding: ../scatter_arg.cu). Torch-free.
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

constexpr int kScatterArgThreads = 256;

// A thread per value, features fastest (coalesced rows, no sort, no per-segment walk): a match
// takes the smallest row with an atomic. The per-segment walk it replaces waited on its longest
// segment (23 M edges, F = 16, H100: 12.4 ms with the extremum, torch_scatter 4.6 ms).
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kScatterArgThreads)
    scatter_arg_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                       const scalar_t* __restrict__ out, int64_t B, int64_t E, int64_t V, int64_t F,
                       unsigned long long* __restrict__ arg) {
  const int64_t total = B * E * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t f = i % F, row = i / F, j = row % E, b = row / E;
    const int64_t v = index[j];
    if (v < 0 || v >= V) continue;
    const int64_t o = (b * V + v) * F + f;
    const acc_t value = static_cast<acc_t>(src[i]), best = static_cast<acc_t>(out[o]);
    if (value == best || (value != value && best != best)) atomicMin(arg + o, static_cast<unsigned long long>(j));
  }
}

}  // namespace pyg_fast::cuda
