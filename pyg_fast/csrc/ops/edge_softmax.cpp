// Schemas of the edge softmax, and its autograd. Kernels: cpu/edge_softmax.cpp, cuda/edge_softmax.cu.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Softmax of src [E, H] over the edges ptr[r]:ptr[r+1] of every destination r, per head:
  // out[e, h] = exp(src[e, h] - max_r) / (sum_r exp(src[., h] - max_r) + 1e-16), as PyG's softmax.
  // lanes: CUDA lanes per row (0: the kernel's rule; other values for tuning sweeps).
  m.def("edge_softmax(Tensor src, Tensor ptr, int lanes=0) -> Tensor");
  // Gradient w.r.t. src given the forward output: out * (grad_out - sum_r(grad_out * out)).
  m.def("edge_softmax_backward(Tensor out, Tensor grad_out, Tensor ptr, int lanes=0) -> Tensor");
  // The same softmax over the edges of each destination index[e] in [0, num_nodes), edges in any
  // order (no grouping: a graph used once, as a sampled mini-batch's): the maxima and sums per
  // destination with atomics on CUDA. An edge whose index is out of range gets 0 and raises
  // flags[0] (int64 [1]); flag_slot >= 0 (CUDA): in that slot of the host ring
  // (cuda/flag_ring.cuh), and the flags come back empty.
  m.def("edge_softmax_coo(Tensor src, Tensor index, SymInt num_nodes, int flag_slot=-1) -> (Tensor out, Tensor flags)");
  m.def("edge_softmax_coo_backward(Tensor out, Tensor grad_out, Tensor index, SymInt num_nodes) -> Tensor");
}

namespace pyg_fast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor edge_softmax_op(const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::edge_softmax", "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(src, ptr, lanes);
}

class EdgeSoftmaxFunction : public torch::autograd::Function<EdgeSoftmaxFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = edge_softmax_op(src, ptr, lanes);
    ctx->save_for_backward({out, ptr});
    ctx->saved_data["lanes"] = lanes;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::edge_softmax_backward", "").typed<
        at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
    auto saved = ctx->get_saved_variables();
    return {op.call(saved[0], grads[0].contiguous(), saved[1], ctx->saved_data["lanes"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

// In C++ for the reason csrc/ops/gather_scatter.cpp gives.
at::Tensor edge_softmax_autograd(const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
  if (!(at::GradMode::is_enabled() && src.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return edge_softmax_op(src, ptr, lanes);
  }
  return EdgeSoftmaxFunction::apply(src, ptr, lanes);
}

using CooOutputs = std::tuple<at::Tensor, at::Tensor>;

CooOutputs edge_softmax_coo_op(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_nodes,
                               int64_t flag_slot) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::edge_softmax_coo", "").typed<
      CooOutputs(const at::Tensor&, const at::Tensor&, c10::SymInt, int64_t)>();
  return op.call(src, index, std::move(num_nodes), flag_slot);
}

class EdgeSoftmaxCooFunction : public torch::autograd::Function<EdgeSoftmaxCooFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                               c10::SymInt num_nodes, int64_t flag_slot) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, flags] = edge_softmax_coo_op(src, index, num_nodes, flag_slot);
    ctx->save_for_backward({out, index});
    ctx->saved_data["num_nodes"] = std::move(num_nodes);
    ctx->mark_non_differentiable({flags});
    ctx->set_materialize_grads(false);  // as gather_scatter's: no zero gradient for the flags
    return {out, flags};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(4);
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::edge_softmax_coo_backward", "").typed<
        at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::SymInt)>();
    auto saved = ctx->get_saved_variables();
    return {op.call(saved[0], grads[0].contiguous(), saved[1], ctx->saved_data["num_nodes"].toSymInt()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

CooOutputs edge_softmax_coo_autograd(const at::Tensor& src, const at::Tensor& index, c10::SymInt num_nodes,
                                     int64_t flag_slot) {
  if (!(at::GradMode::is_enabled() && src.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return edge_softmax_coo_op(src, index, std::move(num_nodes), flag_slot);
  }
  auto outputs = EdgeSoftmaxCooFunction::apply(src, index, std::move(num_nodes), flag_slot);
  return {outputs[0], outputs[1]};
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) {
  m.impl("edge_softmax", &pyg_fast::edge_softmax_autograd);
  m.impl("edge_softmax_coo", &pyg_fast::edge_softmax_coo_autograd);
}
