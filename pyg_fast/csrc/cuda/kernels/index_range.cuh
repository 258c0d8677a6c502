// The index range check's kernel (../index_range.cu launches it). Torch-free.
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

// Up to N indices, passed by value (kernel parameter space).
template <int N>
struct IndexRanges {
  const int64_t* values[N];
  int64_t numel[N];
  uint64_t size[N];
};

// Index blockIdx.y, grid-stride over its values; a block that finds a value outside [0, size)
// (a negative one wraps past every size) sets its flag. Every writer stores the same 1, and the
// flags were zeroed before the launch.
template <int N>
__global__ void index_range_kernel(IndexRanges<N> ranges, int64_t* __restrict__ flags) {
  const int k = blockIdx.y;
  const int64_t* __restrict__ values = ranges.values[k];
  const int64_t n = ranges.numel[k];
  const uint64_t size = ranges.size[k];
  bool bad = false;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    bad |= static_cast<uint64_t>(values[i]) >= size;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) flags[k] = 1;
}

}  // namespace pyg_fast::cuda
