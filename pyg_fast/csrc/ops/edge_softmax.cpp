// Schemas of the edge softmax, and its autograd. Kernels: cpu/edge_softmax.cpp, cuda/edge_softmax.cu.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Softmax of src [E, H] over the edges ptr[r]:ptr[r+1] of every destination r, per head:
  // out[e, h] = exp(src[e, h] - max_r) / (sum_r exp(src[., h] - max_r) + 1e-16), as PyG's softmax.
  // lanes: CUDA lanes per row (0: the kernel's rule; other values for tuning sweeps).
  m.def("edge_softmax(Tensor src, Tensor ptr, int lanes=0) -> Tensor");
  // Gradient w.r.t. src given the forward output: out * (grad_out - sum_r(grad_out * out)).
  m.def("edge_softmax_backward(Tensor out, Tensor grad_out, Tensor ptr, int lanes=0) -> Tensor");
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

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) { m.impl("edge_softmax", &pyg_fast::edge_softmax_autograd); }
