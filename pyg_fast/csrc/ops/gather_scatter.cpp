// Schema of the COO gather-scatter: the gather-reduce of an index used too few times to be worth
// grouping (a sampled mini-batch's), and its autograd. Kernels: cpu/gather_scatter.cpp,
// cuda/gather_scatter.cu.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "autograd.h"
#include "gather_scatter.h"

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[dst_index[e]] += weight[e, h] * x[src_index[e]] for every edge e, x [N, F] -> out
  // [num_rows, F]; src_index None: row e of x itself (a scatter, N == E). weight [E, H] scales
  // head h = f / (F / H); None means 1. With `mean`, row r is divided by its edge count (at
  // least 1), which comes back as `divisor` [num_rows] in x's dtype (empty otherwise). Edges
  // whose source or destination is out of range are skipped and raise flags[0] (source) or
  // flags[1] (destination) of the int64 [2] `flags`. Summed in float32 (float64 for float64)
  // with atomics on CUDA: the order of a row's terms is not fixed there. flag_slot >= 0 (CUDA): the
  // flags are raised in that slot of the host ring (cuda/flag_ring.cuh) and come back empty;
  // kCheckedBefore (-2): none are raised; kAtSite (-3) and kAtSiteSync (-4): a recorded call's,
  // raised for `site` (common/flag_site.h), and the flags come back empty.
  m.def(
      "gather_scatter(Tensor x, Tensor? src_index, Tensor dst_index, Tensor? weight, SymInt num_rows, "
      "bool mean, int flag_slot=-1, str site=\"\") -> (Tensor out, Tensor divisor, Tensor flags)");
}

namespace pyg_fast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Signature = Outputs(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                          const std::optional<at::Tensor>&, c10::SymInt, bool, int64_t, c10::string_view);

Outputs gather_scatter_op(const at::Tensor& x, const std::optional<at::Tensor>& src_index, const at::Tensor& dst_index,
                          const std::optional<at::Tensor>& weight, c10::SymInt num_rows, bool mean,
                          int64_t flag_slot, c10::string_view site = "") {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::gather_scatter", "").typed<Signature>();
  return op.call(x, src_index, dst_index, weight, std::move(num_rows), mean, flag_slot, site);
}

// The gradients, in the op's terms: x's is the gather-scatter of the output gradient back along the
// edges (destination -> source), the weight's the per-edge dot product of the output gradient with
// x's row (sddmm). Both call the dispatcher with autograd, so a double backward records them.
class GatherScatterFunction : public torch::autograd::Function<GatherScatterFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const std::optional<at::Tensor>& src_index,
                               const at::Tensor& dst_index, const std::optional<at::Tensor>& weight,
                               c10::SymInt num_rows, bool mean, int64_t flag_slot, c10::string_view site) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, divisor, flags] =
        gather_scatter_op(x, src_index, dst_index, weight, std::move(num_rows), mean, flag_slot, site);
    // An absent optional is no input of the node: the weight's gradient slot follows the indices given
    const size_t weight_slot = src_index ? 3 : 2;
    const bool weight_grad = weight && ctx->needs_input_grad(weight_slot);
    // x only where the weight's gradient reads it: it is freed sooner
    ctx->save_for_backward({weight_grad ? x : at::Tensor(), src_index.value_or(at::Tensor()), dst_index,
                            weight.value_or(at::Tensor()), mean ? divisor : at::Tensor()});
    ctx->saved_data["num_src"] = x.sym_size(0);
    ctx->saved_data["weight_grad"] = weight_grad;
    ctx->saved_data["mean"] = mean;
    ctx->mark_non_differentiable({divisor, flags});
    // No zero gradients made up for `divisor` and `flags`: two fill kernels and ~60 us of host time
    // a backward call (H100 host, mini-batch SAGE)
    ctx->set_materialize_grads(false);
    return {out, divisor, flags};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(8);  // the output was not used
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &dst_index = saved[2], &weight = saved[3], &divisor = saved[4];
    at::Tensor grad_out = grads[0].contiguous();
    if (ctx->saved_data["mean"].toBool()) grad_out = grad_out.div(divisor.unsqueeze(1));  // as PyG's mean backward
    // A scatter's row e is its own source; the kernels skip out-of-range indices (no gather here),
    // which the forward reported
    const at::Tensor src = saved[1].defined() ? saved[1] : at::arange(dst_index.sym_numel(), dst_index.options());
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      grad_x = std::get<0>(gather_scatter_op(grad_out, dst_index, src, present(weight),
                                             ctx->saved_data["num_src"].toSymInt(), false, kCheckedBefore));
    }
    if (ctx->saved_data["weight_grad"].toBool()) {
      static auto sddmm = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::sddmm", "").typed<
          at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                     int64_t)>();
      const auto heads = weight.sym_size(1);
      const auto width = grad_out.sym_size(1) / heads;
      const auto dots = [&] {
        return sddmm.call(grad_out.view_symint({-1, heads, width}), x.view_symint({-1, heads, width}), dst_index,
                          src, "dot", -1);
      };
      if (at::GradMode::is_enabled()) {  // a backward that is itself recorded (create_graph)
        grad_w = dots();
      } else {  // below sddmm's Python autograd wrapper (about 7 us a call, see below): nothing to record
        at::AutoDispatchBelowADInplaceOrView guard;
        grad_w = dots();
      }
    }
    return {grad_x, at::Tensor(), at::Tensor(), grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The Autograd kernel: without a gradient to record (inference, a compiled graph's forward) straight
// to the device's kernel; else through GatherScatterFunction. In C++, not torch.library's Python
// autograd: that wrapper took 7 of a 15 us call on a CPU host, and with it a compiled step's calls
// took 60 us of host time each on an H200 host.
Outputs gather_scatter_autograd(const at::Tensor& x, const std::optional<at::Tensor>& src_index,
                                const at::Tensor& dst_index, const std::optional<at::Tensor>& weight,
                                c10::SymInt num_rows, bool mean, int64_t flag_slot, c10::string_view site) {
  const bool record = at::GradMode::is_enabled() && (x.requires_grad() || (weight && weight->requires_grad()));
  if (!record) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return gather_scatter_op(x, src_index, dst_index, weight, std::move(num_rows), mean, flag_slot, site);
  }
  auto outputs =
      GatherScatterFunction::apply(x, src_index, dst_index, weight, std::move(num_rows), mean, flag_slot, site);
  return {outputs[0], outputs[1], outputs[2]};
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) { m.impl("gather_scatter", &pyg_fast::gather_scatter_autograd); }
