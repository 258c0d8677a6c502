// Backward kernels of the segment reduction: the spread of sum/mean and the extremum's routing.
// Torch-free.
#pragma once

#include "segment_common.cuh"

namespace pyg_fast::cuda {

// Gradient of sum/mean segment_reduce w.r.t. src [B, E, F]: every row of a segment gets the
// segment's grad_out (divided by the count for mean). Rows outside every segment are left alone.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__global__ void segment_spread_backward_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                               int64_t batch, int64_t num_rows, int64_t num_features,
                                               Groups groups, const scalar_t* __restrict__ grad_out,
                                               scalar_t* __restrict__ grad_src) {
  const int64_t F = num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for_each_segment(groups, ptr, num_segments, batch, num_rows, [&](int64_t b, int64_t r, int64_t lo, int64_t hi) {
    const acc_t inv = R == Reduce::Mean && hi > lo ? acc_t(1) / acc_t(hi - lo) : acc_t(1);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      const Vec<scalar_t, VEC> g =
          *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + (b * num_segments + r) * F + f0);
      Vec<scalar_t, VEC> w;
#pragma unroll
      for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(g.v[k]) * inv);
      for (int64_t e = lo; e < hi; ++e)
        *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_src + (b * num_rows + e) * F + f0) = w;
    }
  });
}

// Gradient of max/min w.r.t. every row (message) of a segment, [B, E, F]: grad_out goes to the
// rows that round to the stored extremum, split evenly among ties; other entries are left alone
// (the caller zero-fills). Works for both row sources (direct rows and weighted gathers).
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
__global__ void segment_extremum_backward_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                                 int64_t batch, Groups groups, Rows rows,
                                                 const scalar_t* __restrict__ grad_out,
                                                 const scalar_t* __restrict__ out,
                                                 scalar_t* __restrict__ grad_rows) {
  const int64_t F = rows.num_features, E = rows.num_rows;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for_each_segment(groups, ptr, num_segments, batch, E, [&](int64_t b, int64_t r, int64_t lo, int64_t hi) {
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      const int64_t o = (b * num_segments + r) * F + f0;
      const Vec<scalar_t, VEC> g = *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + o);
      const Vec<scalar_t, VEC> best = *reinterpret_cast<const Vec<scalar_t, VEC>*>(out + o);
      // The message as the forward pass saw it, rounded to scalar_t like the stored output.
      auto message = [&](int64_t e, Vec<scalar_t, VEC>& m) {
        Vec<scalar_t, VEC> v;
        if (!rows.load(b, e, f0, v)) return false;
        const acc_t s = rows.template scale<acc_t>(e, f0);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          m.v[k] = Rows::kScaled ? static_cast<scalar_t>(s * static_cast<acc_t>(v.v[k])) : v.v[k];
        return true;
      };
      acc_t ties[VEC] = {};
      for (int64_t e = lo; e < hi; ++e) {
        Vec<scalar_t, VEC> m;
        if (!message(e, m)) continue;
#pragma unroll
        for (int k = 0; k < VEC; ++k) ties[k] += static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k]) ? acc_t(1) : acc_t(0);
      }
      acc_t share[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) share[k] = ties[k] > 0 ? static_cast<acc_t>(g.v[k]) / ties[k] : acc_t(0);
      for (int64_t e = lo; e < hi; ++e) {
        Vec<scalar_t, VEC> m, w;
        if (!message(e, m)) continue;
#pragma unroll
        for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k]) ? share[k] : acc_t(0));
        *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_rows + (b * E + e) * F + f0) = w;
      }
    }
  });
}

}  // namespace pyg_fast::cuda
