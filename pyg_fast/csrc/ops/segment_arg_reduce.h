// Schema-level argument checks of segment_arg_reduce, shared by its CPU and CUDA kernels.
#pragma once

#include <ATen/ops/empty.h>

#include <optional>
#include <string>
#include <tuple>

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
// Returns the reduction.
inline ArgReduce check_segment_arg_reduce_args(const at::Tensor& src, const at::Tensor& ptr,
                                               const std::optional<at::Tensor>& perm, c10::string_view reduce) {
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
  return parse_arg_reduce(std::string(reduce));
}

// The outputs: the values [B, V, F] and the rows of the extrema [B, V, F] (empty for mul).
inline std::tuple<at::Tensor, at::Tensor> segment_arg_reduce_outputs(const at::Tensor& src, const at::Tensor& ptr,
                                                                     ArgReduce op) {
  const int64_t B = src.size(0), V = ptr.numel() - 1, F = src.size(2);
  return {at::empty({B, V, F}, src.options()),
          op == ArgReduce::Mul ? at::empty({0}, ptr.options()) : at::empty({B, V, F}, ptr.options())};
}

}  // namespace pyg_fast
