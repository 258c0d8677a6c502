// CUDA binding of one label propagation round; the kernel in kernels/label_propagation.cuh.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/label_propagation.h"
#include "kernels/label_propagation.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor label_propagation_round(const at::Tensor& labels, const at::Tensor& ptr, const at::Tensor& col,
                                   const at::Tensor& nodes, const at::Tensor& offset, const at::Tensor& priority,
                                   at::Tensor& changed) {
  check_label_propagation_round_args(labels, ptr, col, nodes, offset, priority, changed);
  const c10::cuda::CUDAGuard guard(labels.device());
  auto out = labels.clone();  // the kernel reads labels and writes out: every winner sees the old labels
  const int64_t V = labels.numel(), E = col.numel(), P = priority.numel(), n = nodes.numel();
  if (n == 0) return out;
  const int64_t blocks = (n + kLabelPropagationThreadsPerBlock - 1) / kLabelPropagationThreadsPerBlock;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_INDEX_TYPES(labels.scalar_type(), "label_propagation_round_cuda", [&] {
    label_propagation_round_kernel<index_t><<<blocks, kLabelPropagationThreadsPerBlock, 0, stream>>>(
        labels.const_data_ptr<index_t>(), out.mutable_data_ptr<index_t>(), ptr.const_data_ptr<int64_t>(),
        col.const_data_ptr<index_t>(), nodes.const_data_ptr<int64_t>(), offset.const_data_ptr<int64_t>(),
        priority.const_data_ptr<float>(), n, V, E, P,
        reinterpret_cast<unsigned long long*>(changed.mutable_data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("label_propagation_round", &label_propagation_round); }

}  // namespace pyg_fast::cuda
