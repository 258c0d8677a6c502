// CUDA binding of scatter_extremum; kernels in kernels/scatter_extremum.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <type_traits>

#include "../ops/scatter_extremum.h"
#include "coo_launch.cuh"
#include "kernels/scatter_extremum.cuh"

namespace pyg_fast::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor> scatter_extremum(const at::Tensor& src, const at::Tensor& index, int64_t num_rows,
                                                    bool is_max) {
  check_scatter_extremum_args(src, index, num_rows);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t E = src.size(0), F = src.size(1), V = num_rows;
  auto out = at::empty({V, F}, src.options());
  // The flag and the segments' seen marks share one zero fill (one launch less a call).
  const at::Tensor zeroed = zeros_async({1 + V}, index.options());
  const at::Tensor flags = zeroed.narrow(0, 0, 1);
  if (out.numel() == 0) {  // still report an index out of range
    if (E > 0 && V == 0) flags.fill_(1);
    return {out, flags};
  }
  if (E == 0) return {out.zero_(), flags};
  const at::Tensor values = src.contiguous();
  int64_t* seen = zeroed.mutable_data_ptr<int64_t>() + 1;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t start = is_max ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    auto acc = at::full({V, F}, start, src.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const int vec = vector_width(values, F);
    const int lanes_log2 = row_lanes_log2(F, vec);
    const int64_t blocks = ((E << lanes_log2) + kScatterExtremumThreads - 1) / kScatterExtremumThreads;
    const auto launch = [&](auto vec_constant, auto is_max_constant) {
      scatter_extremum_kernel<scalar_t, acc_t, decltype(vec_constant)::value, decltype(is_max_constant)::value>
          <<<blocks, kScatterExtremumThreads, 0, stream>>>(
              values.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), E, F, V, lanes_log2,
              acc.mutable_data_ptr<acc_t>(), seen, zeroed.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const auto with_order = [&](auto vec_constant) {
      if (is_max) launch(vec_constant, std::true_type{});
      else launch(vec_constant, std::false_type{});
    };
    if (vec == 4) with_order(std::integral_constant<int, 4>{});
    else if (vec == 2) with_order(std::integral_constant<int, 2>{});
    else with_order(std::integral_constant<int, 1>{});
    const RowsGrid grid = rows_grid(V, F);
    scatter_extremum_finish_kernel<scalar_t, acc_t><<<grid.blocks, grid.threads, 0, stream>>>(
        acc.const_data_ptr<acc_t>(), seen, V, F, out.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, flags};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("scatter_extremum", &scatter_extremum); }

}  // namespace pyg_fast::cuda
