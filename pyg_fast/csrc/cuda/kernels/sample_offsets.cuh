// The neighbour sampler's draws without replacement (pyg_fast/sampler). Torch-free. The per-node
// rule is host + device code: the CPU kernel (../../cpu/sample_offsets.cpp) includes this header,
// so both devices draw the same offsets for a seed; the CUDA kernel (one thread per node) is
// compiled by nvcc only and launched by ../sample_offsets.cu.
#pragma once

#include <cstdint>

#include "../../common/random.h"

namespace pyg_fast::cuda {

constexpr int kSampleOffsetsThreadsPerBlock = 256;

// The draws of node `node` under `seed`.
PF_HOST_DEVICE uint64_t sample_offsets_key(int64_t seed, int64_t node) {
  return draw64(mix64(static_cast<uint64_t>(seed)), static_cast<uint64_t>(node));
}

// Writes a node's k slots: with deg <= k the offsets 0 .. deg - 1 in order, then -1; else k
// distinct offsets in [0, deg), every k-subset equally likely (Floyd's algorithm: draw r takes a
// t in [0, deg - k + r], or deg - k + r itself where t was taken before).
PF_HOST_DEVICE void sample_offsets_of(int64_t deg, int64_t k, uint64_t key, int64_t* out) {
  if (deg <= k) {
    for (int64_t j = 0; j < k; ++j) out[j] = j < deg ? j : -1;
    return;
  }
  for (int64_t r = 0; r < k; ++r) {
    const int64_t top = deg - k + r;
    int64_t t = static_cast<int64_t>(draw_below(draw64(key, static_cast<uint64_t>(r)), static_cast<uint64_t>(top) + 1u));
    for (int64_t q = 0; q < r; ++q) {
      if (out[q] == t) {
        t = top;
        break;
      }
    }
    out[r] = t;
  }
}

#if defined(__CUDACC__)
// One thread per node; the seed is read on the device (no host synchronisation).
__global__ void sample_offsets_kernel(const int64_t* __restrict__ deg, int64_t num_nodes, int64_t k,
                                      const int64_t* __restrict__ seed, int64_t* __restrict__ out) {
  const int64_t node = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (node >= num_nodes) return;
  const int64_t d = deg[node];
  sample_offsets_of(d < 0 ? 0 : d, k, sample_offsets_key(*seed, node), out + node * k);
}
#endif

}  // namespace pyg_fast::cuda
