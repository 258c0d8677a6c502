// Schema-level argument checks of scatter_extremum, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// src: [E, F] rows in any order, index [E] their segments in [0, num_rows).
inline void check_scatter_extremum_args(const at::Tensor& src, const at::Tensor& index, int64_t num_rows) {
  check_floating(src, "src");
  check_index(index, "index");
  check_same_device(src, index, "src", "index");
  PF_CHECK_VALUE(src.dim() == 2, "pyg_fast: scatter_extremum expects 'src' viewed as [E, F], got ", src.sizes());
  PF_CHECK_VALUE(index.numel() == src.size(0), "pyg_fast: 'index' has ", index.numel(), " entries but 'src' has ",
                 src.size(0), " rows");
  PF_CHECK_VALUE(num_rows >= 0, "pyg_fast: num_rows must be non-negative, got ", num_rows);
}

// The backward's: src [E, F] and index [E] as above, out and grad_out [V, F] of src's dtype.
inline void check_scatter_extremum_backward_args(const at::Tensor& grad_out, const at::Tensor& src,
                                                 const at::Tensor& index, const at::Tensor& out) {
  check_scatter_extremum_args(src, index, out.size(0));
  check_floating(out, "out");
  check_floating(grad_out, "grad_out");
  check_same_device(src, out, "src", "out");
  check_same_device(src, grad_out, "src", "grad_out");
  PF_CHECK_TYPE(out.scalar_type() == src.scalar_type() && grad_out.scalar_type() == src.scalar_type(),
                "pyg_fast: scatter_extremum_backward expects 'out' and 'grad_out' of 'src''s dtype ",
                src.scalar_type(), ", got ", out.scalar_type(), " and ", grad_out.scalar_type());
  PF_CHECK_VALUE(out.dim() == 2 && out.size(1) == src.size(1) && grad_out.sizes() == out.sizes(),
                 "pyg_fast: scatter_extremum_backward expects 'out' and 'grad_out' as [V, ", src.size(1), "], got ",
                 out.sizes(), " and ", grad_out.sizes());
}

}  // namespace pyg_fast
