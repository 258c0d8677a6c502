// CUDA binding of the edge softmax; kernels in kernels/edge_softmax.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/edge_softmax.h"
#include "kernels/edge_softmax.cuh"

namespace pyg_fast::cuda {
namespace {

constexpr int kThreadKernelBlock = 256;

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

at::Tensor edge_softmax(const at::Tensor& src, const at::Tensor& ptr) {
  check_edge_softmax_args(src, ptr);
  const c10::cuda::CUDAGuard guard(src.device());
  auto out = at::empty_like(src);
  const int64_t E = src.size(0), H = src.size(1), V = ptr.numel() - 1;
  if (V == 0 || E == 0 || H == 0) return out;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "edge_softmax_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (H <= 32) {
      edge_softmax_warp_kernel<scalar_t, acc_t>
          <<<blocks_for(V, kSoftmaxWarpsPerBlock), kSoftmaxThreadsPerBlock, 0, stream>>>(
              src.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(), out.mutable_data_ptr<scalar_t>(),
              V, E, static_cast<int>(H));
    } else {
      edge_softmax_thread_kernel<scalar_t, acc_t><<<blocks_for(V * H, kThreadKernelBlock), kThreadKernelBlock, 0, stream>>>(
          src.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(), out.mutable_data_ptr<scalar_t>(), V, E, H);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

at::Tensor edge_softmax_backward(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& ptr) {
  check_edge_softmax_backward_args(out, grad_out, ptr);
  const c10::cuda::CUDAGuard guard(out.device());
  auto grad_src = at::empty_like(out);
  const int64_t E = out.size(0), H = out.size(1), V = ptr.numel() - 1;
  if (V == 0 || E == 0 || H == 0) return grad_src;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "edge_softmax_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (H <= 32) {
      edge_softmax_backward_warp_kernel<scalar_t, acc_t>
          <<<blocks_for(V, kSoftmaxWarpsPerBlock), kSoftmaxThreadsPerBlock, 0, stream>>>(
              out.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(),
              grad_src.mutable_data_ptr<scalar_t>(), V, E, static_cast<int>(H));
    } else {
      edge_softmax_backward_thread_kernel<scalar_t, acc_t>
          <<<blocks_for(V * H, kThreadKernelBlock), kThreadKernelBlock, 0, stream>>>(
              out.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(),
              grad_src.mutable_data_ptr<scalar_t>(), V, E, H);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("edge_softmax", &edge_softmax);
  m.impl("edge_softmax_backward", &edge_softmax_backward);
}

}  // namespace pyg_fast::cuda
