// Schema-level argument checks of sddmm, shared by its CPU and CUDA kernels.
#pragma once

#include <string>

#include "../common/check.h"

namespace pyg_fast {

// Edge-wise binary ops; the integer values index the kernels' op tables.
enum class EdgeOp : int64_t { Dot = 0, Add = 1, Sub = 2, Mul = 3, Div = 4 };

inline EdgeOp parse_edge_op(const std::string& op) {
  if (op == "dot") return EdgeOp::Dot;
  if (op == "add") return EdgeOp::Add;
  if (op == "sub") return EdgeOp::Sub;
  if (op == "mul") return EdgeOp::Mul;
  if (op == "div") return EdgeOp::Div;
  PF_CHECK_VALUE(false, "pyg_fast: sddmm op must be one of 'dot', 'add', 'sub', 'mul', 'div', got '",
                    op, "'");
}

// a: [Na, H, D], b: [Nb, H, D] of one dtype; a_index, b_index: [E] int64 (or both int32 where
// `int32_index`: the CUDA kernels).
inline void check_sddmm_args(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index,
                             const at::Tensor& b_index, bool int32_index = false) {
  check_floating(a, "a");
  check_floating(b, "b");
  check_index(a_index, "a_index", int32_index);
  check_index(b_index, "b_index", int32_index);
  PF_CHECK_TYPE(a_index.scalar_type() == b_index.scalar_type(), "pyg_fast: 'a_index' and 'b_index' differ in dtype (",
                a_index.scalar_type(), " and ", b_index.scalar_type(), ")");
  check_same_device(a, b, "a", "b");
  check_same_device(a, a_index, "a", "a_index");
  check_same_device(a, b_index, "a", "b_index");
  PF_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "pyg_fast: sddmm operands differ in dtype (",
                   a.scalar_type(), " and ", b.scalar_type(), ")");
  PF_CHECK_VALUE(a.dim() == 3 && b.dim() == 3 && a.size(1) == b.size(1) && a.size(2) == b.size(2),
                    "pyg_fast: sddmm expects 'a' [Na, H, D] and 'b' [Nb, H, D], got ", a.sizes(),
                    " and ", b.sizes());
  PF_CHECK_VALUE(a_index.numel() == b_index.numel(),
                    "pyg_fast: 'a_index' and 'b_index' differ in length (", a_index.numel(), " and ",
                    b_index.numel(), ")");
}

}  // namespace pyg_fast
