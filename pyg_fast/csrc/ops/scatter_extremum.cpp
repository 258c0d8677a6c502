// Schema of the COO extremum: the max or min of rows in any order per segment, the first uses of
// an index, where grouping its rows would cost more than the reduction; and its autograd.
// Kernels: cpu/scatter_extremum.cpp, cuda/scatter_extremum.cu.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[r, f] = max (is_max) or min of src[e, f] over the rows e with index[e] == r, 0 for a row
  // with none; src [E, F], out [num_rows, F]. A row whose index is out of range is skipped and
  // raises flags[0] (int64 [1]). With atomics on CUDA (the result does not depend on their order).
  m.def("scatter_extremum(Tensor src, Tensor index, SymInt num_rows, bool is_max) -> (Tensor out, Tensor flags)");
}

namespace pyg_fast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Outputs = std::tuple<at::Tensor, at::Tensor>;

Outputs scatter_extremum_op(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_rows, bool is_max) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::scatter_extremum", "").typed<
      Outputs(const at::Tensor&, const at::Tensor&, c10::SymInt, bool)>();
  return op.call(src, index, std::move(num_rows), is_max);
}

// The gradient goes to the rows equal to their segment's extremum, split evenly among ties per
// feature, as segment_reduce's and torch's scatter_reduce's: composed of torch ops, which a
// compiled backward fuses.
class ScatterExtremumFunction : public torch::autograd::Function<ScatterExtremumFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                               c10::SymInt num_rows, bool is_max) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, flags] = scatter_extremum_op(src, index, num_rows, is_max);
    ctx->save_for_backward({src, index, out});
    ctx->mark_non_differentiable({flags});
    return {out, flags};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &src = saved[0], &index = saved[1], &out = saved[2];
    at::Tensor grad_src;
    if (out.sym_size(0) == 0) {  // no segment: every row was out of range
      grad_src = at::zeros_like(src);
    } else {
      const at::Tensor valid = index.ge(0).logical_and(index.lt(out.sym_size(0)));
      const at::Tensor safe = at::where(valid, index, at::zeros_like(index));
      const at::Tensor hit = src.eq(out.index_select(0, safe)).logical_and(valid.unsqueeze(1));
      const at::Tensor ties = at::zeros_like(out).index_add(0, safe, hit.to(src.scalar_type()));
      const at::Tensor share = grads[0].index_select(0, safe).div(ties.index_select(0, safe).clamp_min(1));
      grad_src = at::where(hit, share, at::zeros_like(share));
    }
    return {grad_src, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// In C++ for the reason csrc/ops/gather_scatter.cpp gives.
Outputs scatter_extremum_autograd(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_rows, bool is_max) {
  if (!(at::GradMode::is_enabled() && src.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scatter_extremum_op(src, index, std::move(num_rows), is_max);
  }
  auto outputs = ScatterExtremumFunction::apply(src, index, std::move(num_rows), is_max);
  return {outputs[0], outputs[1]};
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) { m.impl("scatter_extremum", &pyg_fast::scatter_extremum_autograd); }
