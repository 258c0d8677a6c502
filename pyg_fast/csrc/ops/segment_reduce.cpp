// Schemas of the segment reduction ops, and the autograd of segment_reduce. Kernels:
// cpu/segment_reduce.cpp, cuda/segment_reduce.cu.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

#include "../common/check.h"
#include "autograd.h"

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[b, r] = reduce(src[b, ptr[r]:ptr[r+1]]) for src [B, E, F], ptr [V+1] -> out [B, V, F].
  // config selects the CUDA schedule (pyg_fast/tuning); [] means the default, [-1] the default with
  // the groups schedule allowed, its layout built by the op (tuning::kChooseWithGroups). schedule_data
  // is the per-graph layout the graph-aware schedules read (groups, balanced; see
  // cuda/segment_launch.cuh).
  m.def(
      "segment_reduce(Tensor src, Tensor ptr, str reduce, int[] config=[], Tensor? schedule_data=None) "
      "-> Tensor");
  // Gradient w.r.t. src [B, num_rows, F]. src and out are needed (and read) only by max/min,
  // which split the gradient evenly among tied extrema.
  m.def(
      "segment_reduce_backward(Tensor grad_out, Tensor? src, Tensor? out, Tensor ptr, str reduce, "
      "SymInt num_rows) -> Tensor");
}

namespace pyg_fast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, c10::IntArrayRef,
                             const std::optional<at::Tensor>&);

at::Tensor segment_reduce_op(const at::Tensor& src, const at::Tensor& ptr, c10::string_view reduce,
                             c10::IntArrayRef config, const std::optional<at::Tensor>& schedule_data) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::segment_reduce", "").typed<Signature>();
  return op.call(src, ptr, reduce, config, schedule_data);
}

class SegmentReduceFunction : public torch::autograd::Function<SegmentReduceFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& ptr,
                            c10::string_view reduce, c10::IntArrayRef config,
                            const std::optional<at::Tensor>& schedule_data) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = segment_reduce_op(src, ptr, reduce, config, schedule_data);
    const Reduce kind = parse_reduce(std::string(reduce));
    const bool extremum = kind == Reduce::Max || kind == Reduce::Min;  // only they read src and out backward
    ctx->save_for_backward({extremum ? src : at::Tensor(), extremum ? out : at::Tensor(), ptr});
    ctx->saved_data["reduce"] = std::string(reduce);
    ctx->saved_data["num_rows"] = src.sym_size(1);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("pyg_fast::segment_reduce_backward", "").typed<
        at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                   const at::Tensor&, c10::string_view, c10::SymInt)>();
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = op.call(grads[0].contiguous(), present(saved[0]), present(saved[1]), saved[2],
                              ctx->saved_data["reduce"].toStringRef(), ctx->saved_data["num_rows"].toSymInt());
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// In C++ for the reason csrc/ops/gather_scatter.cpp gives.
at::Tensor segment_reduce_autograd(const at::Tensor& src, const at::Tensor& ptr, c10::string_view reduce,
                                   c10::IntArrayRef config, const std::optional<at::Tensor>& schedule_data) {
  if (!(at::GradMode::is_enabled() && src.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return segment_reduce_op(src, ptr, reduce, config, schedule_data);
  }
  return SegmentReduceFunction::apply(src, ptr, reduce, config, schedule_data);
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_IMPL(pyg_fast, Autograd, m) { m.impl("segment_reduce", &pyg_fast::segment_reduce_autograd); }
