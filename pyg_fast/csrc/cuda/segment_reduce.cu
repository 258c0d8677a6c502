#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/segment_reduce.h"
#include "segment_launch.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor segment_reduce(const at::Tensor& src, const at::Tensor& ptr, c10::string_view reduce,
                          c10::IntArrayRef config, const std::optional<at::Tensor>& schedule_data) {
  check_segment_reduce_args(src, ptr);
  const Reduce op = parse_reduce(std::string(reduce));
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = ptr.numel() - 1;
  auto out = at::empty({B, V, F}, src.options());
  if (out.numel() == 0) return out;
  if (E == 0) return out.zero_();  // every segment is empty
  SegmentConfig c = SegmentConfig::resolve(config, {E, V, F, src.element_size(), false, F, -1, false});
  c.align_to({src.const_data_ptr(), out.const_data_ptr()}, src.element_size());
  at::Tensor built;
  const GraphLayout layout = launch_layout(c, schedule_data, ptr, E, src, built);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    PF_DISPATCH_REDUCE(op, [&] {
      dispatch_vec<scalar_t>(c.vec, [&](auto vec) {
        constexpr int VEC = decltype(vec)::value;
        const DirectRows<scalar_t, VEC> rows{src.const_data_ptr<scalar_t>(), E, F};
        launch_segment_reduce<scalar_t, acc_t, R, VEC>(c, layout, ptr, V, B, rows, out);
      });
    });
  });
  return out;
}

at::Tensor segment_reduce_backward(const at::Tensor& grad_out, const std::optional<at::Tensor>& src_opt,
                                   const std::optional<at::Tensor>& out_opt, const at::Tensor& ptr,
                                   c10::string_view reduce, int64_t num_rows) {
  const Reduce op = parse_reduce(std::string(reduce));
  const bool extremum = check_segment_reduce_backward_args(grad_out, src_opt, out_opt, ptr, op);
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const int64_t B = grad_out.size(0), V = grad_out.size(1), F = grad_out.size(2), E = num_rows;
  // Every entry is written: rows outside every segment get 0.
  auto grad_src = at::empty({B, E, F}, grad_out.options());
  if (grad_src.numel() == 0) return grad_src;
  if (V == 0) return grad_src.zero_();
  const at::Tensor src = extremum ? src_opt->contiguous() : grad_out;
  const at::Tensor out = extremum ? out_opt->contiguous() : grad_out;
  SegmentConfig c = SegmentConfig::plain(F, F, grad_out.element_size());
  c.align_to({grad_out.const_data_ptr(), src.const_data_ptr(), out.const_data_ptr(), grad_src.const_data_ptr()},
             grad_out.element_size());
  const at::Tensor seg = row_segments(ptr, E);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_out.scalar_type(), "segment_reduce_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    dispatch_vec<scalar_t>(c.vec, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      if (extremum) {
        const DirectRows<scalar_t, VEC> rows{src.const_data_ptr<scalar_t>(), E, F};
        launch_extremum_backward<scalar_t, acc_t, VEC>(rows, seg, V, B, out, grad_out, grad_src);
        return;
      }
      const int64_t grid = grid_for(B * E * (F / VEC), kRowThreads);
      const auto spread = [&](auto kernel) {
        kernel<<<grid, kRowThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            ptr.const_data_ptr<int64_t>(), seg.const_data_ptr<int64_t>(), V, B, E, F,
            grad_out.const_data_ptr<scalar_t>(), grad_src.mutable_data_ptr<scalar_t>());
      };
      if (op == Reduce::Mean) spread(segment_spread_backward_kernel<scalar_t, acc_t, Reduce::Mean, VEC>);
      else spread(segment_spread_backward_kernel<scalar_t, acc_t, Reduce::Sum, VEC>);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("segment_reduce", &segment_reduce);
  m.impl("segment_reduce_backward", &segment_reduce_backward);
}

}  // namespace pyg_fast::cuda
