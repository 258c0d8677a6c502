// CUDA binding of one label propagation round; the kernel in kernels/label_propagation.cuh.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/label_propagation.h"
#include "kernels/label_propagation.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor label_propagation_round(const at::Tensor& labels, const at::Tensor& ptr, const at::Tensor& col,
                                   int64_t seed, int64_t round, at::Tensor& changed) {
  check_label_propagation_round_args(labels, ptr, col, changed);
  const c10::cuda::CUDAGuard guard(labels.device());
  auto out = at::empty_like(labels);  // the kernel writes every node and reads labels only
  const int64_t V = labels.numel(), E = col.numel();
  if (V == 0) return out;
  const int64_t blocks = (V + kLabelPropagationThreadsPerBlock - 1) / kLabelPropagationThreadsPerBlock;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_INDEX_TYPES(labels.scalar_type(), "label_propagation_round_cuda", [&] {
    label_propagation_round_kernel<index_t><<<blocks, kLabelPropagationThreadsPerBlock, 0, stream>>>(
        labels.const_data_ptr<index_t>(), out.mutable_data_ptr<index_t>(), ptr.const_data_ptr<int64_t>(),
        col.const_data_ptr<index_t>(), V, E, seed, round,
        reinterpret_cast<unsigned long long*>(changed.mutable_data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("label_propagation_round", &label_propagation_round); }

}  // namespace pyg_fast::cuda
