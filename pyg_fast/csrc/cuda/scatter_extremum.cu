// CUDA binding of scatter_extremum; kernels in kernels/scatter_extremum.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "../ops/scatter_extremum.h"
#include "kernels/scatter_extremum.cuh"

namespace pyg_fast::cuda {
namespace {

// Blocks for a grid-stride pass over `values`: a few waves at most.
int64_t blocks_for(int64_t values) {
  const int64_t resident = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
  return std::max<int64_t>(1, std::min((values + kScatterExtremumThreads - 1) / kScatterExtremumThreads, resident));
}

std::tuple<at::Tensor, at::Tensor> scatter_extremum(const at::Tensor& src, const at::Tensor& index, int64_t num_rows,
                                                    bool is_max) {
  check_scatter_extremum_args(src, index, num_rows);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t E = src.size(0), F = src.size(1), V = num_rows;
  auto out = at::empty({V, F}, src.options());
  auto flags = at::zeros({1}, index.options());
  if (out.numel() == 0) {  // still report an index out of range
    if (E > 0 && V == 0) flags.fill_(1);
    return {out, flags};
  }
  if (E == 0) return {out.zero_(), flags};
  const at::Tensor values = src.contiguous();
  auto seen = at::zeros({V}, index.options().dtype(at::kInt));
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t start = is_max ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    auto acc = at::full({V, F}, start, src.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const int64_t n = E * F;
    if (is_max) {
      scatter_extremum_kernel<scalar_t, acc_t, true><<<blocks_for(n), kScatterExtremumThreads, 0, stream>>>(
          values.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), n, F, V, acc.mutable_data_ptr<acc_t>(),
          seen.mutable_data_ptr<int>(), flags.mutable_data_ptr<int64_t>());
    } else {
      scatter_extremum_kernel<scalar_t, acc_t, false><<<blocks_for(n), kScatterExtremumThreads, 0, stream>>>(
          values.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), n, F, V, acc.mutable_data_ptr<acc_t>(),
          seen.mutable_data_ptr<int>(), flags.mutable_data_ptr<int64_t>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    scatter_extremum_finish_kernel<scalar_t, acc_t><<<blocks_for(V * F), kScatterExtremumThreads, 0, stream>>>(
        acc.const_data_ptr<acc_t>(), seen.const_data_ptr<int>(), V * F, F, out.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, flags};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("scatter_extremum", &scatter_extremum); }

}  // namespace pyg_fast::cuda
