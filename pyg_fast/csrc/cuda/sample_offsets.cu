// CUDA binding of the neighbour sampler's draws; the kernel in kernels/sample_offsets.cuh.
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/sample_offsets.h"
#include "kernels/sample_offsets.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor sample_offsets(const at::Tensor& deg, int64_t k, const at::Tensor& seed) {
  check_sample_offsets_args(deg, k, seed);
  const c10::cuda::CUDAGuard guard(deg.device());
  const int64_t P = deg.numel();
  auto out = at::empty({P, k}, deg.options());
  if (P == 0 || k == 0) return out;
  const int64_t blocks = (P + kSampleOffsetsThreadsPerBlock - 1) / kSampleOffsetsThreadsPerBlock;
  sample_offsets_kernel<<<blocks, kSampleOffsetsThreadsPerBlock, 0, at::cuda::getCurrentCUDAStream()>>>(
      deg.const_data_ptr<int64_t>(), P, k, seed.const_data_ptr<int64_t>(), out.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("sample_offsets", &sample_offsets); }

}  // namespace pyg_fast::cuda
