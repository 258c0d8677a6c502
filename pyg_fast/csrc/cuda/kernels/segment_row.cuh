// The row and row_parallel schedules of the segment kernels (see segment_reduce.cuh).
// Torch-free.
#pragma once

#include "segment_common.cuh"

namespace pyg_fast::cuda {

// Row schedule: out [B, V, F]; one group per (b, r) and slice of `feature_slice` features
// (blockIdx.y; a multiple of lanes * VEC).
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_rows_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                    Groups groups, Rows rows, int64_t feature_slice, scalar_t* __restrict__ out) {
  const int64_t F = rows.num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  const int64_t f_begin = static_cast<int64_t>(blockIdx.y) * feature_slice;
  const int64_t f_end = min(F, f_begin + feature_slice);
  for_each_segment(groups, ptr, num_segments, batch, rows.num_rows, [&](int64_t b, int64_t r, int64_t lo, int64_t hi) {
    for (int64_t f0 = f_begin + static_cast<int64_t>(groups.lane()) * VEC; f0 < f_end; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, hi - lo);
    }
  });
}

// Row-parallel schedule: out [B, V, F]; one group per (b, r), lanes split the segment's rows.
// Groups of one warp loop in lockstep (inactive groups fold nothing) so the shuffles are safe.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_rows_parallel_kernel(const int64_t* __restrict__ ptr, int64_t num_segments,
                                             int64_t batch, Groups groups, Rows rows,
                                             scalar_t* __restrict__ out) {
  const int64_t F = rows.num_features, total = batch * num_segments;
  const int lane = groups.lane();
  const int64_t warp_first = groups.first() - (threadIdx.x % 32) / groups.lanes;
  for (int64_t base = warp_first; base < total; base += groups.stride()) {
    const int64_t i = base + (threadIdx.x % 32) / groups.lanes;
    const bool active = i < total;
    const int64_t b = active ? i / num_segments : 0, r = active ? i - b * num_segments : 0;
    int64_t lo = 0, hi = 0;
    if (active) segment_bounds(ptr, r, rows.num_rows, lo, hi);
    for (int64_t f0 = 0; f0 < F; f0 += VEC) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_rows<acc_t, R, VEC>(rows, b, lo + lane, hi, f0, acc, groups.lanes);
      for (int offset = groups.lanes / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          acc[k] = Reducer<R, acc_t>::update(acc[k], __shfl_xor_sync(kFullMask, acc[k], offset, groups.lanes));
      }
      if (active && lane == 0) store_final<scalar_t, acc_t, R, VEC>(out + i * F + f0, acc, hi - lo);
    }
  }
}

}  // namespace pyg_fast::cuda
