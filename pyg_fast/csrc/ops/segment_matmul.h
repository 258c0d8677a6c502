// Argument checks of segment_matmul for the C++ kernels (the Triton CUDA implementation is
// reached through the Python wrapper, which checks the same conditions).
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// input: [M, K]; ptr: [T + 1] int64 on the CPU (the CPU kernel reads it directly); other: [T, K, N];
// bias: [T, N] or undefined.
inline void check_segment_matmul_args(const at::Tensor& input, const at::Tensor& ptr,
                                      const at::Tensor& other, const c10::optional<at::Tensor>& bias) {
  check_floating(input, "input");
  check_floating(other, "other");
  check_ptr(ptr);
  check_same_device(input, other, "input", "other");
  PF_CHECK_TYPE(input.scalar_type() == other.scalar_type(), "pyg_fast: segment_matmul operands differ in dtype (",
                   input.scalar_type(), " and ", other.scalar_type(), ")");
  PF_CHECK_VALUE(input.dim() == 2 && other.dim() == 3 && input.size(1) == other.size(1),
                    "pyg_fast: segment_matmul expects 'input' [M, K] and 'other' [T, K, N], got ", input.sizes(),
                    " and ", other.sizes());
  PF_CHECK_VALUE(ptr.numel() == other.size(0) + 1, "pyg_fast: 'ptr' has ", ptr.numel(),
                    " entries but 'other' holds ", other.size(0), " types (T + 1 = ", other.size(0) + 1,
                    " expected)");
  if (bias.has_value() && bias->defined()) {
    check_floating(*bias, "bias");
    check_same_device(input, *bias, "input", "bias");
    PF_CHECK_TYPE(bias->scalar_type() == input.scalar_type(), "pyg_fast: 'bias' is ", bias->scalar_type(),
                     " but 'input' is ", input.scalar_type());
    PF_CHECK_VALUE(bias->dim() == 2 && bias->size(0) == other.size(0) && bias->size(1) == other.size(2),
                      "pyg_fast: 'bias' must be [T, N] = [", other.size(0), ", ", other.size(2), "], got ",
                      bias->sizes());
  }
}

// ptr (on the CPU) must run from 0 to num_rows without decreasing.
inline void check_ptr_values(const at::Tensor& ptr, int64_t num_rows) {
  PF_CHECK_VALUE(ptr.device().is_cpu(), "pyg_fast: this kernel reads 'ptr' on the host, got ", ptr.device());
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  const int64_t T = ptr.numel() - 1;
  PF_CHECK_VALUE(p[0] == 0 && p[T] == num_rows, "pyg_fast: 'ptr' must start at 0 and end at the number of rows (",
                    num_rows, "), got ", p[0], " and ", p[T]);
  for (int64_t t = 0; t < T; ++t)
    PF_CHECK_VALUE(p[t] <= p[t + 1], "pyg_fast: 'ptr' must be non-decreasing, but ptr[", t, "] = ", p[t],
                      " > ptr[", t + 1, "] = ", p[t + 1]);
}

}  // namespace pyg_fast
