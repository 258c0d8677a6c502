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

}  // namespace pyg_fast
