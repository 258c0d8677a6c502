// Schema-level argument checks of segment_reduce, shared by its CPU and CUDA kernels.
#pragma once

#include <optional>

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

// grad_out: [B, V, F]; src and out are required for max/min. Returns whether op is max/min.
inline bool check_segment_reduce_backward_args(const at::Tensor& grad_out, const std::optional<at::Tensor>& src,
                                               const std::optional<at::Tensor>& out, const at::Tensor& ptr,
                                               Reduce op) {
  const bool extremum = op == Reduce::Max || op == Reduce::Min;
  check_segment_reduce_args(grad_out, ptr);
  PF_CHECK_VALUE(!extremum || (src.has_value() && out.has_value()),
                 "pyg_fast: segment_reduce_backward needs 'src' and 'out' for max/min");
  PF_CHECK_VALUE(ptr.numel() == grad_out.size(1) + 1, "pyg_fast: 'grad_out' has ", grad_out.size(1),
                 " rows but 'ptr' describes ", ptr.numel() - 1);
  return extremum;
}

}  // namespace pyg_fast
