// The balanced schedule of the segment kernels (G-Sparse's degree-sorted rows; see segment_reduce.cuh).
// Torch-free.
#pragma once

#include "segment_common.cuh"

namespace pyg_fast::cuda {

// Balanced-rows schedule (G-Sparse). One warp per segment, segments taken in the order row_order
// (by decreasing length, built once per graph), so the warps of a block carry similar work and the
// longest segments start first. A warp is `lanes` feature lanes times 32 / lanes edge lanes. It walks
// its segment in tiles of 32 rows: each lane stages one row's source offset (and a single-head
// weight) in shared memory with one coalesced load, then edge lane s folds rows s, s + 32 / lanes, ...
// of the tile. Each thread holds kBalancedTile output vectors strided by lanes * VEC features (1-D
// strided register tiling), so one walk over the rows covers kBalancedTile * lanes * VEC features; a
// shuffle tree over the edge lanes combines them. Each segment is written once: deterministic.
using tuning::kBalancedTile;
constexpr int kMaxWarpsPerBlock = 32;

// Folds UNROLL staged rows t, t + step, ... into the kBalancedTile vectors of acc.
template <int UNROLL, typename acc_t, Reduce R, int VEC, typename Rows>
__device__ __forceinline__ void fold_staged_rows(const Rows& rows, const int64_t* staged_offset,
                                                 const acc_t* staged_weight, bool staged_scale, int t, int step,
                                                 int64_t e0, int64_t f_first, int64_t f_stride,
                                                 acc_t (&acc)[kBalancedTile][VEC]) {
  using scalar_t = typename Rows::scalar_type;
  const int64_t F = rows.num_features;
  Vec<scalar_t, VEC> v[UNROLL][kBalancedTile];
  int64_t o[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    o[u] = staged_offset[t + u * step];
#pragma unroll
    for (int k = 0; k < kBalancedTile; ++k)
      if (o[u] >= 0 && f_first + k * f_stride < F) rows.load_at(o[u], f_first + k * f_stride, v[u][k]);
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (o[u] < 0) continue;
#pragma unroll
    for (int k = 0; k < kBalancedTile; ++k) {
      const int64_t f = f_first + k * f_stride;
      if (f >= F) continue;
      const acc_t s = staged_scale ? staged_weight[t + u * step]
                                   : rows.template scale<acc_t>(e0 + t + u * step, f);
      fold_vec<acc_t, R, Rows::kScaled>(acc[k], v[u][k], s);
    }
  }
}

template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_balanced_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ row_order,
                                        int64_t num_segments, int64_t batch, int lanes, Rows rows,
                                        scalar_t* __restrict__ out) {
  __shared__ int64_t staged_offset[kMaxWarpsPerBlock][kWarpSize];
  __shared__ acc_t staged_weight[kMaxWarpsPerBlock][kWarpSize];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int feature_lane = lane % lanes, edge_lane = lane / lanes, edge_lanes = kWarpSize / lanes;
  const int64_t F = rows.num_features, E = rows.num_rows, f_stride = static_cast<int64_t>(lanes) * VEC;
  bool staged_scale = false;
  if constexpr (Rows::kScaled) staged_scale = rows.num_heads == 1;
  const int64_t warps_per_block = blockDim.x / kWarpSize, warps = gridDim.x * warps_per_block;
  for (int64_t i = blockIdx.x * warps_per_block + warp; i < batch * num_segments; i += warps) {
    const int64_t b = i / num_segments, r = row_order[i - b * num_segments];
    if (r < 0 || r >= num_segments) continue;  // the whole warp shares i: uniform
    int64_t lo, hi;
    segment_bounds(ptr, r, E, lo, hi);
    for (int64_t base = 0; base < F; base += f_stride * kBalancedTile) {
      const int64_t f_first = base + static_cast<int64_t>(feature_lane) * VEC;
      acc_t acc[kBalancedTile][VEC];
#pragma unroll
      for (int k = 0; k < kBalancedTile; ++k) init_acc<acc_t, R, VEC>(acc[k]);
      for (int64_t e0 = lo; e0 < hi; e0 += kWarpSize) {
        const int n = static_cast<int>(min(static_cast<int64_t>(kWarpSize), hi - e0));
        __syncwarp();  // the previous tile has been read
        if (lane < n) {
          staged_offset[warp][lane] = rows.offset(b, e0 + lane);
          if (staged_scale) staged_weight[warp][lane] = rows.template scale<acc_t>(e0 + lane, 0);
        }
        __syncwarp();
        int t = edge_lane;
        for (; t + 3 * edge_lanes < n; t += 4 * edge_lanes)
          fold_staged_rows<4, acc_t, R, VEC>(rows, staged_offset[warp], staged_weight[warp], staged_scale, t,
                                             edge_lanes, e0, f_first, f_stride, acc);
        for (; t < n; t += edge_lanes)
          fold_staged_rows<1, acc_t, R, VEC>(rows, staged_offset[warp], staged_weight[warp], staged_scale, t,
                                             edge_lanes, e0, f_first, f_stride, acc);
      }
      for (int offset = lanes; offset < kWarpSize; offset *= 2) {
#pragma unroll
        for (int k = 0; k < kBalancedTile; ++k) {
#pragma unroll
          for (int j = 0; j < VEC; ++j)
            acc[k][j] = Reducer<R, acc_t>::update(acc[k][j], __shfl_xor_sync(kFullMask, acc[k][j], offset));
        }
      }
      if (edge_lane == 0) {
#pragma unroll
        for (int k = 0; k < kBalancedTile; ++k) {
          const int64_t f = f_first + k * f_stride;
          if (f < F) store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f, acc[k], hi - lo);
        }
      }
    }
  }
}

}  // namespace pyg_fast::cuda
