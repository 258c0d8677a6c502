// CUDA binding of scatter_arg; the kernel in kernels/scatter_arg.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "../ops/scatter_arg.h"
#include "kernels/scatter_arg.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor scatter_arg(const at::Tensor& src, const at::Tensor& index, const at::Tensor& out) {
  check_scatter_arg_args(src, index, out);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = out.size(1);
  auto arg = at::full({B, V, F}, E, index.options());
  if (src.numel() == 0) return arg;
  const int lanes = arg_feature_lanes(F), rows = kScatterArgThreads / lanes;
  const dim3 block(lanes, rows);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((E + rows - 1) / rows, 1 << 20)),
                  static_cast<unsigned>(std::min<int64_t>(B, 65535)));
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_arg", [&] {
    scatter_arg_kernel<scalar_t, at::opmath_type<scalar_t>><<<grid, block, 0, stream>>>(
        src.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), out.const_data_ptr<scalar_t>(), B, E, V, F,
        reinterpret_cast<unsigned long long*>(arg.mutable_data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return arg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("scatter_arg", &scatter_arg); }

}  // namespace pyg_fast::cuda
