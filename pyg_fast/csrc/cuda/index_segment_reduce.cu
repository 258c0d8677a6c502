#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/index_segment_reduce.h"
#include "gathered_launch.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor index_segment_reduce(const at::Tensor& x, const at::Tensor& src_index, const at::Tensor& ptr,
                                const std::optional<at::Tensor>& weight, c10::string_view reduce,
                                c10::IntArrayRef config, const std::optional<at::Tensor>& schedule_data) {
  check_index_segment_reduce_args(x, src_index, ptr, weight, /*int32_index=*/true);
  const Reduce op = parse_reduce(std::string(reduce));
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t F = x.size(1), V = ptr.numel() - 1, E = src_index.numel();
  const int64_t head_dim = weight ? F / weight->size(1) : F;
  auto out = at::empty({V, F}, x.options());
  if (out.numel() == 0) return out;
  if (E == 0) return out.zero_();
  SegmentConfig c = SegmentConfig::resolve(config, {E, V, F, x.element_size(), true, head_dim, -1, false});
  c.align_to({x.const_data_ptr(), out.const_data_ptr()}, x.element_size());
  at::Tensor built;
  const GraphLayout layout = launch_layout(c, schedule_data, ptr, E, x, built);
  if (src_index.scalar_type() == at::kInt) {
    launch_gathered<int32_t>(c, layout, op, x, src_index, ptr, weight, out);
  } else {
    launch_gathered<int64_t>(c, layout, op, x, src_index, ptr, weight, out);
  }
  return out;
}

at::Tensor index_segment_reduce_extremum_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                  const at::Tensor& src_index, const at::Tensor& ptr,
                                                  const std::optional<at::Tensor>& weight,
                                                  const at::Tensor& out) {
  check_index_segment_reduce_args(x, src_index, ptr, weight);
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t F = x.size(1), V = ptr.numel() - 1, E = src_index.numel();
  const int64_t head_dim = weight ? F / weight->size(1) : F;
  auto grad_msg = at::empty({E, F}, x.options());  // every entry written
  if (grad_msg.numel() == 0) return grad_msg;
  if (V == 0) return grad_msg.zero_();
  const at::Tensor g = grad_out.contiguous(), best = out.contiguous();
  SegmentConfig c = SegmentConfig::plain(F, head_dim, x.element_size());
  c.align_to({x.const_data_ptr(), g.const_data_ptr(), best.const_data_ptr(), grad_msg.const_data_ptr()},
             x.element_size());
  const at::Tensor seg = row_segments(ptr, E);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "index_segment_reduce_extremum_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_gathered_rows<scalar_t, int64_t>(c, x, src_index, weight, [&](const auto& rows) {
      constexpr int VEC = std::decay_t<decltype(rows)>::kVec;
      launch_extremum_backward<scalar_t, acc_t, VEC>(rows, seg, V, 1, best, g, grad_msg);
    });
  });
  return grad_msg;
}

}  // namespace

template void launch_gathered<int64_t>(const SegmentConfig&, const GraphLayout&, Reduce, const at::Tensor&,
                                       const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       at::Tensor&);

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("index_segment_reduce", &index_segment_reduce);
  m.impl("index_segment_reduce_extremum_backward", &index_segment_reduce_extremum_backward);
}

}  // namespace pyg_fast::cuda
