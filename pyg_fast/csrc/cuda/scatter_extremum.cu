// CUDA bindings of scatter_extremum and its backward; kernels in kernels/scatter_extremum.cuh and
// (the backward's, shared with the grouped reductions) kernels/segment_backward.cuh.
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
#include "flag_ring.cuh"
#include "segment_launch.cuh"
#include "kernels/scatter_extremum.cuh"

namespace pyg_fast::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor> scatter_extremum(const at::Tensor& src, const at::Tensor& index, int64_t num_rows,
                                                    bool is_max, int64_t flag_slot) {
  check_scatter_extremum_args(src, index, num_rows);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t E = src.size(0), F = src.size(1), V = num_rows;
  auto out = at::empty({V, F}, src.options());
  // A flag kept on the device and the segments' seen marks share one zero fill (one launch less a call).
  const bool in_ring = flag_slot >= 0;
  const at::Tensor zeroed = zeros_async({(in_ring ? 0 : 1) + V}, index.options());
  const FlagBuffer flags = in_ring ? flag_buffer(1, flag_slot, index.options())
                                   : FlagBuffer{zeroed.narrow(0, 0, 1), zeroed.mutable_data_ptr<int64_t>()};
  if (out.numel() == 0) {  // still report an index out of range
    if (E > 0 && V == 0) {
      if (in_ring) {
        static const int64_t kRaised = 1;
        C10_CUDA_CHECK(cudaMemcpyAsync(flags.data, &kRaised, sizeof(kRaised), cudaMemcpyDefault,
                                       at::cuda::getCurrentCUDAStream()));
      } else {
        flags.tensor.fill_(1);
      }
    }
    return {out, flags.tensor};
  }
  if (E == 0) return {out.zero_(), flags.tensor};
  const at::Tensor values = src.contiguous();
  int64_t* seen = zeroed.mutable_data_ptr<int64_t>() + (in_ring ? 0 : 1);
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t start = is_max ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    // float32 and float64 take the extrema straight into out (see scatter_extremum_finish_kernel)
    at::Tensor acc = std::is_same_v<acc_t, scalar_t>
                         ? out.fill_(start)
                         : at::full({V, F}, start, src.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const int vec = vector_width(values, F);
    const int lanes_log2 = row_lanes_log2(F, vec);
    const int64_t blocks = ((E << lanes_log2) + kScatterExtremumThreads - 1) / kScatterExtremumThreads;
    const auto launch = [&](auto vec_constant, auto is_max_constant) {
      scatter_extremum_kernel<scalar_t, acc_t, decltype(vec_constant)::value, decltype(is_max_constant)::value>
          <<<blocks, kScatterExtremumThreads, 0, stream>>>(
              values.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), E, F, V, lanes_log2,
              acc.mutable_data_ptr<acc_t>(), seen, flags.data);
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
  return {out, flags.tensor};
}

// The rows' segments are the index itself (rows out of range get 0).
at::Tensor scatter_extremum_backward(const at::Tensor& grad_out, const at::Tensor& src, const at::Tensor& index,
                                     const at::Tensor& out) {
  check_scatter_extremum_backward_args(grad_out, src, index, out);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t E = src.size(0), F = src.size(1), V = out.size(0);
  auto grad_src = at::empty({E, F}, src.options());  // every entry written
  if (grad_src.numel() == 0) return grad_src;
  if (V == 0) return grad_src.zero_();
  SegmentConfig c = SegmentConfig::plain(F, F, src.element_size());
  c.align_to({src.const_data_ptr(), out.const_data_ptr(), grad_out.const_data_ptr(), grad_src.const_data_ptr()},
             src.element_size());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    dispatch_vec<scalar_t>(c.vec, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      const DirectRows<scalar_t, VEC> rows{src.const_data_ptr<scalar_t>(), E, F};
      launch_extremum_backward<scalar_t, acc_t, VEC>(rows, index, V, 1, out, grad_out, grad_src);
    });
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("scatter_extremum", &scatter_extremum);
  m.impl("scatter_extremum_backward", &scatter_extremum_backward);
}

}  // namespace pyg_fast::cuda
