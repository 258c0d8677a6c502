#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

#include "../ops/segment_arg_reduce.h"
#include "kernels/segment_arg_reduce.cuh"

namespace pyg_fast::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor> segment_arg_reduce(const at::Tensor& src, const at::Tensor& ptr,
                                                      const std::optional<at::Tensor>& perm,
                                                      c10::string_view reduce) {
  const ArgReduce op = check_segment_arg_reduce_args(src, ptr, perm, reduce);
  const c10::cuda::CUDAGuard guard(src.device());
  auto outputs = segment_arg_reduce_outputs(src, ptr, op);
  at::Tensor &out = std::get<0>(outputs), &arg = std::get<1>(outputs);
  if (out.numel() == 0) return outputs;
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = ptr.numel() - 1;
  const int64_t blocks = std::min<int64_t>((out.numel() + kArgReduceThreads - 1) / kArgReduceThreads, 1 << 20);
  const int64_t* order = perm.has_value() ? perm->const_data_ptr<int64_t>() : nullptr;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_arg_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    PF_DISPATCH_ARG_REDUCE(op, [&] {
      segment_arg_reduce_kernel<R, scalar_t, acc_t><<<blocks, kArgReduceThreads, 0, stream>>>(
          src.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(), order, B, E, V, F,
          out.mutable_data_ptr<scalar_t>(), op == ArgReduce::Mul ? nullptr : arg.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("segment_arg_reduce", &segment_arg_reduce); }

}  // namespace pyg_fast::cuda
