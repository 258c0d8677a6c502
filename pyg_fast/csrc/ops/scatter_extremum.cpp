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
  // flag_slot >= 0 (CUDA): the flag is raised in that slot of the host ring (cuda/flag_ring.cuh)
  // and comes back empty.
  m.def("scatter_extremum(Tensor src, Tensor index, SymInt num_rows, bool is_max, int flag_slot=-1) "
        "-> (Tensor out, Tensor flags)");
  // Its gradient w.r.t. src: grad_out[index[e], f] split evenly among the rows e that equal their
  // segment's extremum out[index[e], f], 0 for the other rows (and for rows out of range).
  m.def("scatter_extremum_backward(Tensor grad_out, Tensor src, Tensor index, Tensor out) -> Tensor");
}

namespace pyg_fast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Outputs = std::tuple<at::Tensor, at::Tensor>;

Outputs scatter_extremum_op(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_rows, bool is_max,
                            int64_t flag_slot) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::scatter_extremum", "").typed<
      Outputs(const at::Tensor&, const at::Tensor&, c10::SymInt, bool, int64_t)>();
  return op.call(src, index, std::move(num_rows), is_max, flag_slot);
}

at::Tensor scatter_extremum_backward_op(const at::Tensor& grad_out, const at::Tensor& src, const at::Tensor& index,
                                        const at::Tensor& out) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::scatter_extremum_backward", "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(grad_out, src, index, out);
}

class ScatterExtremumFunction : public torch::autograd::Function<ScatterExtremumFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                               c10::SymInt num_rows, bool is_max, int64_t flag_slot) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, flags] = scatter_extremum_op(src, index, num_rows, is_max, flag_slot);
    ctx->save_for_backward({src, index, out});
    ctx->mark_non_differentiable({flags});
    ctx->set_materialize_grads(false);  // as gather_scatter's: no zero gradient for the flags
    return {out, flags};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(5);
    auto saved = ctx->get_saved_variables();
    const at::Tensor &src = saved[0], &index = saved[1], &out = saved[2];
    const at::Tensor grad_src = scatter_extremum_backward_op(grads[0].contiguous(), src, index, out);
    return {grad_src, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// In C++ for the reason csrc/ops/gather_scatter.cpp gives.
Outputs scatter_extremum_autograd(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_rows, bool is_max,
                                  int64_t flag_slot) {
  if (!(at::GradMode::is_enabled() && src.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scatter_extremum_op(src, index, std::move(num_rows), is_max, flag_slot);
  }
  auto outputs = ScatterExtremumFunction::apply(src, index, std::move(num_rows), is_max, flag_slot);
  return {outputs[0], outputs[1]};
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) { m.impl("scatter_extremum", &pyg_fast::scatter_extremum_autograd); }
