// The eager CUDA path of segment_matmul: the Triton kernels pyg_fast/triton/segment_matmul.py
// compiled for one (ptr, K, N, dtype, gradients asked for) launched from C++, with a C++
// autograd node. A small heterogeneous layer's step is host-bound; this path leaves Python out of
// the launches and the backward (no interpreter lock on autograd's device thread).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

#include "../common/check.h"
#include "kernel_launch.h"

namespace pyg_fast {

// Everything one call of segment_matmul runs, built by native_program in pyg_fast/triton/segment_matmul.py.
class SegmmProgram : public torch::CustomClassHolder {
 public:
  using Kernel = c10::intrusive_ptr<TritonKernel>;

  // forward: out [M, N] = segmented x [M, K] @ w [T, K, N] (+ bias).
  SegmmProgram(Kernel forward, int64_t M, int64_t K, int64_t N, int64_t T)
      : forward_(std::move(forward)), M_(M), K_(K), N_(N), T_(T) {}

  // The kernel of the weight (and bias) gradient: grad_w [T, rows, N] with rows = K + bias_grad,
  // atomically into fp32 or summed from `num_partials` fp32 partials counted by `num_counters`
  // arrival counters; it also writes the input gradient when `fused_input_grad`.
  void set_weight_grad(Kernel kernel, bool weight_grad, bool bias_grad, bool atomic, int64_t num_partials,
                       int64_t num_counters, bool fused_input_grad) {
    weight_grad_kernel_ = std::move(kernel);
    weight_grad_ = weight_grad;
    bias_grad_ = bias_grad;
    atomic_ = atomic;
    num_partials_ = num_partials;
    num_counters_ = num_counters;
    input_grad_ = input_grad_ || fused_input_grad;
  }

  // The input gradient's own kernel (the forward kernel on the gradient and w transposed).
  void set_input_grad(Kernel kernel) {
    input_grad_kernel_ = std::move(kernel);
    input_grad_ = true;
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias) const {
    check(x, w, bias);
    at::Tensor out = at::empty({M_, N_}, x.options());
    RoleTensors roles(kNumRoles);
    roles[kInput] = x;
    roles[kWeight] = w;
    if (bias.has_value()) roles[kBias] = *bias;
    roles[kOut] = out;
    forward_->launch(roles);
    return out;
  }

  // (grad_x, grad_w, grad_bias), undefined where not asked for.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& x, const at::Tensor& w,
                                                          const at::Tensor& grad_out) {
    at::Tensor grad = grad_out.contiguous();
    if (reinterpret_cast<uintptr_t>(grad.data_ptr()) % 16 != 0) grad = grad.clone();  // the kernels assume it
    TORCH_CHECK(grad.sizes() == at::IntArrayRef({M_, N_}) && grad.scalar_type() == x.scalar_type(),
                "pyg_fast: segment_matmul got a gradient of shape ", text(grad.sizes()), " and dtype ",
                text(grad.scalar_type()), " for an output of shape ", text(at::IntArrayRef({M_, N_})));
    RoleTensors roles(kNumRoles);
    roles[kInput] = x;
    roles[kWeight] = w;
    roles[kGrad] = grad;
    at::Tensor grad_x, grad_w, grad_bias;
    if (input_grad_) roles[kGradInput] = grad_x = at::empty_like(x);
    if (weight_grad_kernel_) {
      const int64_t rows = K_ + bias_grad_;
      at::Tensor sums = atomic_ ? at::zeros({T_, rows, N_}, x.options().dtype(at::kFloat))
                                : at::empty({T_, rows, N_}, x.options());
      roles[kGradWeight] = sums;
      if (num_partials_ > 0) roles[kPartials] = at::empty({num_partials_, rows, N_}, x.options().dtype(at::kFloat));
      if (num_counters_ > 0) roles[kCounters] = counters(x.device().index());
      weight_grad_kernel_->launch(roles);
      if (atomic_) sums = sums.to(x.scalar_type());
      if (weight_grad_) grad_w = bias_grad_ ? sums.narrow(1, 0, K_) : sums;
      if (bias_grad_) grad_bias = sums.select(1, K_);
    }
    if (input_grad_kernel_) input_grad_kernel_->launch(roles);
    return {grad_x, grad_w, grad_bias};
  }

 private:
  void check(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias) const {
    TORCH_CHECK(x.sizes() == at::IntArrayRef({M_, K_}) && w.sizes() == at::IntArrayRef({T_, K_, N_}) &&
                    x.is_contiguous() && w.is_contiguous() && w.scalar_type() == x.scalar_type(),
                "pyg_fast: segment_matmul program for [", std::to_string(M_), ", ", std::to_string(K_), "] @ [",
                std::to_string(T_), ", ", std::to_string(K_), ", ", std::to_string(N_), "] got ", text(x.sizes()),
                " @ ", text(w.sizes()));
    TORCH_CHECK(!bias.has_value() || (bias->sizes() == at::IntArrayRef({T_, N_}) && bias->is_contiguous()),
                "pyg_fast: segment_matmul program got a bias of shape ", text(bias->sizes()));
  }

  // The ordered weight-gradient reduction's arrival counters: zero between launches (the kernel
  // resets them), one set per stream so that launches on different streams never share one.
  at::Tensor counters(c10::DeviceIndex device) {
    void* stream = current_cuda_stream(device);
    std::lock_guard<std::mutex> lock(mutex_);
    at::Tensor& found = counters_[stream];
    if (!found.defined()) {
      found = at::zeros({num_counters_}, at::TensorOptions().dtype(at::kInt).device(c10::DeviceType::CUDA, device));
    }
    return found;
  }

  Kernel forward_, weight_grad_kernel_, input_grad_kernel_;
  int64_t M_, K_, N_, T_;
  bool weight_grad_ = false, bias_grad_ = false, atomic_ = false, input_grad_ = false;
  int64_t num_partials_ = 0, num_counters_ = 0;
  std::mutex mutex_;
  std::unordered_map<void*, at::Tensor> counters_;
};

namespace {

// Programs by integer handle: an op argument of a torchbind type costs about 10 us of binding
// per call from Python, an int well under 1 us. Python releases a handle when the plan that
// cached it dies; an autograd node keeps its own reference.
class ProgramRegistry {
 public:
  int64_t add(c10::intrusive_ptr<SegmmProgram> program) {
    std::lock_guard<std::mutex> lock(mutex_);
    programs_.emplace(next_, std::move(program));
    return next_++;
  }
  void release(int64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    programs_.erase(handle);
  }
  c10::intrusive_ptr<SegmmProgram> find(int64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = programs_.find(handle);
    TORCH_CHECK(found != programs_.end(), "pyg_fast: no segment_matmul program has handle ", std::to_string(handle));
    return found->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int64_t, c10::intrusive_ptr<SegmmProgram>> programs_;
  int64_t next_ = 1;
};

ProgramRegistry& registry() {
  static ProgramRegistry programs;
  return programs;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SegmmFunction : public torch::autograd::Function<SegmmFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& bias, const c10::intrusive_ptr<SegmmProgram>& program) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["program"] = program;
    return program->forward(x, w, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto program = ctx->saved_data["program"].toCustomClass<SegmmProgram>();
    auto [grad_x, grad_w, grad_bias] = program->backward(saved[0], saved[1], grad_outputs[0]);
    return {grad_x, grad_w, grad_bias, at::Tensor()};
  }
};

at::Tensor segment_matmul_program(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                                  int64_t handle) {
  const auto program = registry().find(handle);
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (x.requires_grad() || w.requires_grad() || (bias.has_value() && bias->requires_grad()));
  if (!needs_grad) return program->forward(x, w, bias);  // inference: no autograd node to build
  return SegmmFunction::apply(x, w, bias, program);
}

}  // namespace
}  // namespace pyg_fast

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  using pyg_fast::SegmmProgram;
  m.class_<SegmmProgram>("SegmmProgram")
      .def(torch::init<SegmmProgram::Kernel, int64_t, int64_t, int64_t, int64_t>())
      .def("set_weight_grad", &SegmmProgram::set_weight_grad)
      .def("set_input_grad", &SegmmProgram::set_input_grad)
      // a handle for segment_matmul_program, valid until segment_matmul_program_release
      .def("handle", [](const c10::intrusive_ptr<SegmmProgram>& self) { return pyg_fast::registry().add(self); });
  m.def("segment_matmul_program_release(int program) -> ()",
        torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd,
                        [](int64_t handle) { pyg_fast::registry().release(handle); }));
  // segment_matmul on CUDA, eager mode, through the program of a handle (pyg_fast/triton/
  // segment_matmul.py builds it; its Python caller checks the arguments); differentiable w.r.t.
  // x, w and bias.
  m.def("segment_matmul_program(Tensor x, Tensor w, Tensor? bias, int program) -> Tensor",
        torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd, &pyg_fast::segment_matmul_program));
}
