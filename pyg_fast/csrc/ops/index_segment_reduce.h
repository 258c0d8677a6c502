// Schema-level argument checks of index_segment_reduce, shared by its CPU and CUDA kernels.
#pragma once

#include <c10/util/Optional.h>

#include "../common/check.h"

namespace pyg_fast {

// x: [N, F]; src_index: [E] int64 (or int32 where `int32_index`: the CUDA forward); ptr: [V + 1]
// int64; weight: optional [E, H], H | F.
inline void check_index_segment_reduce_args(const at::Tensor& x, const at::Tensor& src_index,
                                            const at::Tensor& ptr,
                                            const std::optional<at::Tensor>& weight,
                                            bool int32_index = false) {
  check_floating(x, "x");
  PF_CHECK_VALUE(x.dim() == 2, "pyg_fast: index_segment_reduce expects 'x' viewed as [N, F], got ",
                    x.sizes());
  check_index(src_index, "src_index", int32_index);
  check_ptr(ptr);
  check_same_device(x, src_index, "x", "src_index");
  check_same_device(x, ptr, "x", "ptr");
  if (weight.has_value()) check_edge_weight(*weight, x, src_index.numel(), x.size(1));
}

}  // namespace pyg_fast
