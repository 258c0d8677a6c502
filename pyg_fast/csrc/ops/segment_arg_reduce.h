// Schema-level argument checks of segment_arg_reduce, shared by its CPU and CUDA kernels.
#pragma once

#include <optional>
#include <string>

#include "../common/check.h"
#include "../common/segment_arg_reduce.h"

namespace pyg_fast {

inline ArgReduce parse_arg_reduce(const std::string& reduce) {
  if (reduce == "max") return ArgReduce::Max;
  if (reduce == "min") return ArgReduce::Min;
  PF_CHECK_VALUE(reduce == "mul", "pyg_fast: segment_arg_reduce's reduce must be 'max', 'min' or 'mul', got '",
                 reduce, "'");
  return ArgReduce::Mul;
}

// src: [B, E, F] contiguous, any real dtype; ptr: [V + 1] int64; perm: [E] int64 or none.
inline void check_segment_arg_reduce_args(const at::Tensor& src, const at::Tensor& ptr,
                                          const std::optional<at::Tensor>& perm) {
  check_ptr(ptr);
  check_same_device(src, ptr, "src", "ptr");
  PF_CHECK_VALUE(src.dim() == 3, "pyg_fast: segment_arg_reduce expects 'src' viewed as [B, E, F], got ",
                 src.sizes());
  PF_CHECK_VALUE(src.is_contiguous(), "pyg_fast: 'src' must be contiguous");
  PF_CHECK_TYPE(!src.is_complex() && src.scalar_type() != at::kBool,
                "pyg_fast: segment_arg_reduce takes real values, got ", src.scalar_type());
  if (perm.has_value()) {
    check_index(*perm, "perm");
    check_same_device(src, *perm, "src", "perm");
    PF_CHECK_VALUE(perm->numel() == src.size(1), "pyg_fast: 'perm' has ", perm->numel(), " entries but 'src' has ",
                   src.size(1), " rows");
  }
}

}  // namespace pyg_fast
