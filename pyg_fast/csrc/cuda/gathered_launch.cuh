// The gather-reduce launch of index_segment_reduce for one source index type. Its kernels are
// instantiated once per index type in a translation unit of their own (index_segment_reduce.cu for
// int64, index_segment_reduce_int32.cu for int32): in one file they compiled for 388 s on 16 cores,
// the whole build's critical path.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include "segment_launch.cuh"

namespace pyg_fast::cuda {

// Calls f(rows) with the gathered row source of the right vector width and weighting over the
// source index of type index_t.
template <typename scalar_t, typename index_t, typename F>
void with_gathered_rows(const SegmentConfig& c, const at::Tensor& x, const at::Tensor& src_index,
                        const std::optional<at::Tensor>& weight, const F& f) {
  const int64_t H = weight ? weight->size(1) : 1;
  const int64_t N = x.size(0), Fdim = x.size(1), E = src_index.numel();
  dispatch_vec<scalar_t>(c.vec, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const index_t* ip = src_index.const_data_ptr<index_t>();
    if (weight) {
      f(GatheredRows<scalar_t, VEC, true, index_t>{xp, ip, weight->const_data_ptr<scalar_t>(), N, E, Fdim, H,
                                                    Fdim / H});
    } else {
      f(GatheredRows<scalar_t, VEC, false, index_t>{xp, ip, nullptr, N, E, Fdim, 1, Fdim});
    }
  });
}

// out [V, F] = the reduction `op` of the gathered rows of x over the segments of ptr.
template <typename index_t>
void launch_gathered(const SegmentConfig& c, const GraphLayout& layout, Reduce op, const at::Tensor& x,
                     const at::Tensor& src_index, const at::Tensor& ptr, const std::optional<at::Tensor>& weight,
                     at::Tensor& out) {
  const int64_t V = ptr.numel() - 1;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "index_segment_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    PF_DISPATCH_REDUCE(op, [&] {
      with_gathered_rows<scalar_t, index_t>(c, x, src_index, weight, [&](const auto& rows) {
        constexpr int VEC = std::decay_t<decltype(rows)>::kVec;
        launch_segment_reduce<scalar_t, acc_t, R, VEC>(c, layout, ptr, V, 1, rows, out);
      });
    });
  });
}

extern template void launch_gathered<int32_t>(const SegmentConfig&, const GraphLayout&, Reduce, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&,
                                               const std::optional<at::Tensor>&, at::Tensor&);
extern template void launch_gathered<int64_t>(const SegmentConfig&, const GraphLayout&, Reduce, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&,
                                               const std::optional<at::Tensor>&, at::Tensor&);

}  // namespace pyg_fast::cuda
