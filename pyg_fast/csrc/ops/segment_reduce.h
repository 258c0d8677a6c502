// Schema-level argument checks of segment_reduce, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// src: [B, E, F] contiguous floating point; ptr: [V + 1] int64.
inline void check_segment_reduce_args(const at::Tensor& src, const at::Tensor& ptr) {
  check_floating(src, "src");
  check_ptr(ptr);
  check_same_device(src, ptr, "src", "ptr");
  PF_CHECK_VALUE(src.dim() == 3, "pyg_fast: segment_reduce expects 'src' viewed as [B, E, F], got ",
                    src.sizes());
}

}  // namespace pyg_fast
