// The groups schedule of the segment kernels (GNNAdvisor's neighbour groups; see segment_reduce.cuh).
// Torch-free.
#pragma once

#include "segment_chunk.cuh"

namespace pyg_fast::cuda {

// The groups schedule's end for a segment r whose groups span blocks c0 .. c1, called by the group
// that led r in this block once the block's partials of r are written (for every b and feature):
// counts the block in, and the last of the (c1 - c0 + 1) * gridDim.y blocks to arrive combines the
// partials and resets the counter. Not inlined: the kernel's main loop then keeps its registers
// (and occupancy), which this rare path would otherwise raise.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__device__ __noinline__ void finish_spanning_segment(const int64_t* __restrict__ group_ptr, int64_t r, int64_t count,
                                                     int64_t num_segments, int64_t batch, int64_t F, int lanes,
                                                     const acc_t* __restrict__ carry, scalar_t* __restrict__ out,
                                                     unsigned* __restrict__ arrivals) {
  const int per_block = blockDim.x / lanes, lane = threadIdx.x % lanes;
  const int64_t span_first = group_ptr[r], c0 = span_first / per_block, c1 = (group_ptr[r + 1] - 1) / per_block;
  const int warp_lane = threadIdx.x % kWarpSize;
  const unsigned group_mask =
      lanes == kWarpSize ? kFullMask : ((1u << lanes) - 1u) << (warp_lane - lane);  // this group's lanes
  // The group's carry stores happen before lane 0's release (the warp barrier orders them, the
  // release is cumulative); the last arrival's acquire happens before the group's loads. Lighter
  // than a full __threadfence around the count.
  __syncwarp(group_mask);
  unsigned arrived = 0;
  if (lane == 0)
    arrived = ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device>(arrivals[c0]).fetch_add(
                  1u, ::cuda::std::memory_order_acq_rel) + 1u;
  arrived = __shfl_sync(group_mask, arrived, 0, lanes);
  if (arrived != static_cast<unsigned>((c1 - c0 + 1) * gridDim.y)) return;
  __syncwarp(group_mask);
  const int64_t tile = static_cast<int64_t>(lanes) * VEC;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f0 = static_cast<int64_t>(lane) * VEC; f0 < F; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      fold_carries<1, acc_t, R, VEC>(carry, b, gridDim.x, F, f0, c0, c1, span_first != c0 * per_block, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, count);
    }
  }
  if (lane == 0) arrivals[c0] = 0;
}

// Neighbour-group schedule (GNNAdvisor), one launch. The layout (built once per graph by
// pyg_fast/ops/_layout.py) cuts every segment into groups of at most `group_size` consecutive rows,
// packed in segment order, an empty segment into one group of no rows: group g covers rows
// [group_start[g], group_start[g + 1]) of segment group_segment[g], and segment r owns groups
// [group_ptr[r], group_ptr[r + 1]). Long segments are split over many groups and short ones share a
// block, so the work per group is bounded.
// A block takes blockDim.x / lanes consecutive groups, each served by `lanes` dimension workers
// (consecutive VEC-wide features, coalesced). Each group folds its rows in registers and leaves its
// partial in shared memory; the leader (the segment's first group in the block) combines the
// partials and writes the segment once, without atomics; empty segments are written by their own
// group. A segment whose groups span blocks leaves one partial per block in carry [B, num_blocks, 2,
// F] instead (slot 0 when it is the block's first segment, else slot 1); each of its blocks then
// counts itself in arrivals[its first block], and the last to arrive combines the partials in block
// order and resets the counter to 0 (so the next launch finds it zeroed): deterministic, valid for
// every reduction, and no second pass over the segments. All loops around __syncthreads are
// block-uniform.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void segment_groups_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ group_ptr,
                                      const int64_t* __restrict__ group_start,
                                      const int64_t* __restrict__ group_segment, int64_t num_segments,
                                      int64_t num_groups, int64_t batch, int lanes, Rows rows,
                                      scalar_t* __restrict__ out, acc_t* __restrict__ carry,
                                      unsigned* __restrict__ arrivals) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  // partial[k * threads + thread]: feature k of the thread's vector (conflict-free).
  acc_t* partial = reinterpret_cast<acc_t*>(shared_bytes);
  const int64_t F = rows.num_features, E = rows.num_rows, tile = static_cast<int64_t>(lanes) * VEC;
  const int per_block = blockDim.x / lanes, slot = threadIdx.x / lanes, lane = threadIdx.x % lanes;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * per_block, num_blocks = gridDim.x;
  const int in_block = static_cast<int>(min(static_cast<int64_t>(per_block), num_groups - first));
  const int64_t g = first + slot;
  int64_t lo = 0, hi = 0, r = -1;
  if (slot < in_block) {
    lo = min(max(group_start[g], int64_t(0)), E);
    hi = min(max(group_start[g + 1], lo), E);
    r = group_segment[g];
  }
  const bool valid = 0 <= r && r < num_segments;
  const bool leader = valid && (slot == 0 || group_segment[g - 1] != r);
  int run = 0;  // the leader's segment has groups slot .. slot + run - 1 in this block
  if (leader)
    while (slot + run < in_block && group_segment[g + run] == r) ++run;
  const bool whole = leader && group_ptr[r] >= first && group_ptr[r + 1] <= first + in_block;
  const int carry_slot = leader && group_ptr[r] <= first ? 0 : 1;
  int64_t seg_lo = 0, seg_hi = 0;
  if (leader) segment_bounds(ptr, r, E, seg_lo, seg_hi);
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    for (int64_t base = 0; base < F; base += tile) {
      const int64_t f0 = base + static_cast<int64_t>(lane) * VEC;
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      if (valid && f0 < F) fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
      const unsigned thread = opaque_thread_index(), threads = opaque_block_size();
#pragma unroll
      for (int k = 0; k < VEC; ++k) partial[k * threads + thread] = acc[k];
      __syncthreads();
      if (leader && f0 < F) {
        for (int j = 1; j < run; ++j) {
#pragma unroll
          for (int k = 0; k < VEC; ++k)
            acc[k] = Reducer<R, acc_t>::update(acc[k], partial[k * threads + thread + j * lanes]);
        }
        if (whole) {
          store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, seg_hi - seg_lo);
        } else {
          acc_t* dst = carry + ((b * num_blocks + blockIdx.x) * 2 + carry_slot) * F + f0;
#pragma unroll
          for (int k = 0; k < VEC; ++k) dst[k] = acc[k];
        }
      }
      __syncthreads();
    }
  }
  if (leader && !whole)
    finish_spanning_segment<scalar_t, acc_t, R, VEC>(group_ptr, r, seg_hi - seg_lo, num_segments, batch, F, lanes,
                                                     carry, out, arrivals);
}

}  // namespace pyg_fast::cuda
