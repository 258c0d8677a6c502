// The segment of a row of a CSR pointer, host + device: the per-graph preparation (layout.cuh, and
// through it the CPU kernels) and the segment backward kernels (segment_backward.cuh) share it.
// Torch-free.
#pragma once

#include <cstdint>

#include "../../common/reduce.h"  // PF_HOST_DEVICE

namespace pyg_fast::cuda {

// The segment of row e of the CSR pointer ptr[0:V+1]: the last r with ptr[r] <= e, clamped into
// [0, V - 1] (rows past ptr[V], the invalid ones grouped last, get V - 1; callers pass V >= 1).
PF_HOST_DEVICE int64_t layout_segment_of(const int64_t* __restrict__ ptr, int64_t V, int64_t e) {
  int64_t lo = 0, hi = V + 1;  // upper bound: first r with ptr[r] > e
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ptr[mid] <= e) lo = mid + 1; else hi = mid;
  }
  const int64_t r = lo - 1;
  return r < 0 ? 0 : (r > V - 1 ? V - 1 : r);
}

}  // namespace pyg_fast::cuda
