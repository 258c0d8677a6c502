#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <tuple>

#include "../ops/segment_arg_reduce.h"

namespace pyg_fast::cpu {
namespace {

std::tuple<at::Tensor, at::Tensor> segment_arg_reduce(const at::Tensor& src, const at::Tensor& ptr,
                                                      const std::optional<at::Tensor>& perm, c10::string_view reduce) {
  const ArgReduce op = check_segment_arg_reduce_args(src, ptr, perm, reduce);
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = ptr.numel() - 1;
  auto outputs = segment_arg_reduce_outputs(src, ptr, op);
  at::Tensor &out = std::get<0>(outputs), &arg = std::get<1>(outputs);
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  const int64_t* order = perm.has_value() ? perm->const_data_ptr<int64_t>() : nullptr;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_arg_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    int64_t* a = op == ArgReduce::Mul ? nullptr : arg.mutable_data_ptr<int64_t>();
    PF_DISPATCH_ARG_REDUCE(op, [&] {
      // A segment's rows stay in cache across its F columns.
      at::parallel_for(0, B * V, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t b = i / V, r = i % V;
          for (int64_t f = 0; f < F; ++f)
            segment_arg_reduce_one<R, scalar_t, acc_t>(s + b * E * F + f, F, order, p[r], p[r + 1], E,
                                                       o + i * F + f, a ? a + i * F + f : nullptr);
        }
      });
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("segment_arg_reduce", &segment_arg_reduce); }

}  // namespace pyg_fast::cpu
