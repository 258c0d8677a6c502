#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "../ops/segment_matmul.h"

namespace pyg_fast::cpu {
namespace {

// The GEMMs call the CPU kernels directly (at::cpu::*), below autograd: they write into views of
// the output.
// Runs fn(t) for every segment: in parallel over segments when no single segment holds most of
// the work (many small GEMMs), else serially so that each GEMM can use all threads itself.
template <typename F>
void for_each_segment(const int64_t* p, int64_t T, F fn) {
  int64_t total = 0, largest = 0;
  for (int64_t t = 0; t < T; ++t) {
    total += p[t + 1] - p[t];
    largest = std::max(largest, p[t + 1] - p[t]);
  }
  if (T > 1 && largest * 2 < total) {
    at::parallel_for(0, T, 1, [&](int64_t lo, int64_t hi) {
      // Worker threads need not inherit the caller's dispatch state (seen with torch 2.11):
      // keep autograd out of the slices and out= products taken there.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      for (int64_t t = lo; t < hi; ++t) fn(t);
    });
  } else {
    for (int64_t t = 0; t < T; ++t) fn(t);
  }
}

at::Tensor segment_matmul(const at::Tensor& input, const at::Tensor& ptr, const at::Tensor& other,
                          const c10::optional<at::Tensor>& bias, c10::optional<bool> /*deterministic*/) {
  check_segment_matmul_args(input, ptr, other, bias);
  check_ptr_values(ptr, input.size(0));
  const int64_t T = other.size(0), N = other.size(2);
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  auto out = at::empty({input.size(0), N}, input.options());
  const bool with_bias = bias.has_value() && bias->defined();
  for_each_segment(p, T, [&](int64_t t) {
    if (p[t + 1] == p[t]) return;
    auto rows = input.slice(0, p[t], p[t + 1]);
    auto dst = out.slice(0, p[t], p[t + 1]);
    if (with_bias)
      at::cpu::addmm_out(dst, (*bias)[t], rows, other[t]);
    else
      at::cpu::mm_out(dst, rows, other[t]);
  });
  return out;
}

at::Tensor segment_matmul_weight_grad(const at::Tensor& input, const at::Tensor& ptr, const at::Tensor& grad_out,
                                      bool /*deterministic: the CPU kernel always is*/) {
  check_floating(input, "input");
  check_floating(grad_out, "grad_out");
  check_ptr(ptr);
  PF_CHECK_VALUE(input.dim() == 2 && grad_out.dim() == 2 && input.size(0) == grad_out.size(0),
                    "pyg_fast: segment_matmul_weight_grad expects 'input' [M, K] and 'grad_out' [M, N], got ",
                    input.sizes(), " and ", grad_out.sizes());
  PF_CHECK_TYPE(input.scalar_type() == grad_out.scalar_type(), "pyg_fast: 'input' and 'grad_out' differ in dtype");
  check_ptr_values(ptr, input.size(0));
  const int64_t T = ptr.numel() - 1;
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  auto out = at::zeros({T, input.size(1), grad_out.size(1)}, input.options());
  for_each_segment(p, T, [&](int64_t t) {
    if (p[t + 1] == p[t]) return;
    auto dst = out[t];
    at::cpu::mm_out(dst, input.slice(0, p[t], p[t + 1]).t(), grad_out.slice(0, p[t], p[t + 1]));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("segment_matmul", &segment_matmul);
  m.impl("segment_matmul_weight_grad", &segment_matmul_weight_grad);
}

}  // namespace pyg_fast::cpu
