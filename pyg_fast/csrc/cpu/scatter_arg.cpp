// CPU kernel of scatter_arg: rows in order, so the first match of a value is its row.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <algorithm>

#include "../common/segment_arg_reduce.h"
#include "../ops/scatter_arg.h"

namespace pyg_fast::cpu {
namespace {

constexpr int64_t kFeaturesPerTask = 16;  // a task owns whole columns: no two tasks write one value

at::Tensor scatter_arg(const at::Tensor& src, const at::Tensor& index, const at::Tensor& out) {
  check_scatter_arg_args(src, index, out);
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = out.size(1);
  auto arg = at::full({B, V, F}, E, index.options());
  if (src.numel() == 0) return arg;
  const int64_t chunks = (F + kFeaturesPerTask - 1) / kFeaturesPerTask;
  const int64_t* idx = index.const_data_ptr<int64_t>();
  int64_t* a = arg.mutable_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_arg", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    const scalar_t* o = out.const_data_ptr<scalar_t>();
    at::parallel_for(0, B * chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / chunks, f0 = (task % chunks) * kFeaturesPerTask;
        const int64_t f1 = std::min(F, f0 + kFeaturesPerTask);
        for (int64_t j = 0; j < E; ++j) {
          const int64_t v = idx[j];
          if (v < 0 || v >= V) continue;
          for (int64_t f = f0; f < f1; ++f) {
            const int64_t at = (b * V + v) * F + f;
            const acc_t value = static_cast<acc_t>(s[(b * E + j) * F + f]), best = static_cast<acc_t>(o[at]);
            if (a[at] == E && holds_extremum(value, best)) a[at] = j;
          }
        }
      }
    });
  });
  return arg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("scatter_arg", &scatter_arg); }

}  // namespace pyg_fast::cpu
