#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops/index_segment_reduce.h"
#include "segment_launch.cuh"

namespace pyg_fast::cuda {
namespace {

// Calls f(rows) with the gathered row source of the right vector width and weighting, and of the
// source index's type where INT32_INDEX (int32 or int64; else int64 only).
template <typename scalar_t, bool INT32_INDEX = false, typename F>
void with_gathered_rows(const SegmentConfig& c, const at::Tensor& x, const at::Tensor& src_index,
                        const std::optional<at::Tensor>& weight, const F& f) {
  const int64_t H = weight ? weight->size(1) : 1;
  const int64_t N = x.size(0), Fdim = x.size(1), E = src_index.numel();
  dispatch_vec<scalar_t>(c.vec, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const auto with_index = [&](auto index_type) {
      using index_t = decltype(index_type);
      const index_t* ip = src_index.const_data_ptr<index_t>();
      if (weight) {
        f(GatheredRows<scalar_t, VEC, true, index_t>{xp, ip, weight->const_data_ptr<scalar_t>(), N, E, Fdim, H,
                                                      Fdim / H});
      } else {
        f(GatheredRows<scalar_t, VEC, false, index_t>{xp, ip, nullptr, N, E, Fdim, 1, Fdim});
      }
    };
    if constexpr (INT32_INDEX) {
      if (src_index.scalar_type() == at::kInt) return with_index(int32_t{});
    }
    with_index(int64_t{});
  });
}

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
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "index_segment_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    PF_DISPATCH_REDUCE(op, [&] {
      with_gathered_rows<scalar_t, /*INT32_INDEX=*/true>(c, x, src_index, weight, [&](const auto& rows) {
        constexpr int VEC = std::decay_t<decltype(rows)>::kVec;
        launch_segment_reduce<scalar_t, acc_t, R, VEC>(c, layout, ptr, V, 1, rows, out);
      });
    });
  });
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
    with_gathered_rows<scalar_t>(c, x, src_index, weight, [&](const auto& rows) {
      constexpr int VEC = std::decay_t<decltype(rows)>::kVec;
      launch_extremum_backward<scalar_t, acc_t, VEC>(rows, seg, V, 1, best, g, grad_msg);
    });
  });
  return grad_msg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("index_segment_reduce", &index_segment_reduce);
  m.impl("index_segment_reduce_extremum_backward", &index_segment_reduce_extremum_backward);
}

}  // namespace pyg_fast::cuda
