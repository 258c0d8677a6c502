// Launching kernels that Triton compiled, from C++: what Triton's Python launcher does per call
// (bind the arguments, find the stream, cuLaunchKernel), without Python. The CUDA driver is
// opened at run time, so this compiles and loads without CUDA headers or a GPU.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <vector>

namespace pyg_fast {

// The tensors of one call of a program, by role. A kernel parameter that is a tensor's data
// pointer names its role; Role in pyg_fast/triton/launcher.py mirrors these numbers.
enum Role : int64_t {
  kInput = 0,
  kWeight = 1,
  kBias = 2,
  kOut = 3,
  kGrad = 4,
  kGradInput = 5,
  kGradWeight = 6,
  kPartials = 7,
  kCounters = 8,
  kNumRoles = 9,
};
using RoleTensors = std::vector<at::Tensor>;  // kNumRoles entries, undefined where unused

// One compiled Triton kernel with its grid, block and every argument fixed except the data
// pointers of the call's tensors. Built once per launch shape by native_kernel in pyg_fast/triton/launcher.py.
class TritonKernel : public torch::CustomClassHolder {
 public:
  // function: the CUfunction (Triton's CompiledKernel.function) loaded on CUDA device `device`;
  // param_bits[i]: parameter i's value (an integer's bits, or a fixed tensor's address, kept
  // alive by keep_alive) unless param_role[i] >= 0 names the role whose data pointer it is;
  // param_bytes[i]: its size, checked against the compiled kernel's own parameter list.
  TritonKernel(int64_t function, int64_t device, std::vector<int64_t> grid, int64_t num_threads,
               int64_t shared_bytes, std::vector<int64_t> param_bits, std::vector<int64_t> param_bytes,
               std::vector<int64_t> param_role, std::vector<at::Tensor> keep_alive);

  // Launches on the device's current stream.
  void launch(const RoleTensors& tensors) const;

 private:
  void* function_;
  c10::DeviceIndex device_;
  unsigned grid_[3];
  unsigned num_threads_;
  unsigned shared_bytes_;
  std::vector<uint64_t> param_bits_;
  std::vector<int64_t> param_role_;
  std::vector<at::Tensor> keep_alive_;
};

// The raw handle of the current CUDA stream of `device` (no CUDA headers needed).
void* current_cuda_stream(c10::DeviceIndex device);

}  // namespace pyg_fast
