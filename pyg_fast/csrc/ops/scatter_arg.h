// Schema-level argument checks of scatter_arg, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// src [B, E, F] and out [B, V, F]: contiguous, one floating dtype; index [E] int64; one device.
inline void check_scatter_arg_args(const at::Tensor& src, const at::Tensor& index, const at::Tensor& out) {
  PF_CHECK_VALUE(src.dim() == 3 && out.dim() == 3 && src.size(0) == out.size(0) && src.size(2) == out.size(2),
                 "pyg_fast: scatter_arg expects 'src' [B, E, F] and 'out' [B, V, F], got ", src.sizes(), " and ",
                 out.sizes());
  PF_CHECK_TYPE(src.is_floating_point() && out.scalar_type() == src.scalar_type(),
                "pyg_fast: scatter_arg takes floating 'src' and 'out' of one dtype, got ", src.scalar_type(), " and ",
                out.scalar_type());
  PF_CHECK_VALUE(src.is_contiguous() && out.is_contiguous(), "pyg_fast: 'src' and 'out' must be contiguous");
  check_index(index, "index");
  PF_CHECK_VALUE(index.numel() == src.size(1), "pyg_fast: 'index' has ", index.numel(), " entries but 'src' has ",
                 src.size(1), " rows");
  check_same_device(src, index, "src", "index");
  check_same_device(src, out, "src", "out");
}

}  // namespace pyg_fast
