// The chunk schedule of the segment kernels (see segment_reduce.cuh) and its fixup pass, which the
// edges schedule shares; the carry slots that the edges and groups schedules also fill.
// Torch-free.
#pragma once

#include "segment_common.cuh"

namespace pyg_fast::cuda {

// Last r in [0, num_segments) with ptr[r] <= e (ptr non-decreasing).
__device__ __forceinline__ int64_t segment_of(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t e) {
  int64_t lo = 0, hi = num_segments;  // invariant: answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (ptr[mid] <= e) lo = mid; else hi = mid;
  }
  return lo;
}

// Chunk schedule, pass 1. Requires ptr[0] == 0 and ptr[V] == E (a COO index always gives that).
// carry is [B, num_chunks, 2, F] in acc_t: slot 0 holds the partial of the segment that contains
// the chunk's first row, slot 1 that of the segment containing its last row, each only when that
// segment is not wholly inside the chunk. float rows held to 64 registers: weighted 4-float rows
// took 70, 28 warps an SM instead of 32, and SpMM of F = 128 on a power-law graph of 2 M edges ran
// 0.392 ms against 0.319 at 64 (8 bytes spilled), H200. Half rows (80-94) would spill 28-192 bytes
// at 64, unmeasured: left to the compiler.
constexpr int chunk_max_registers(int value_size) { return value_size == 4 ? 64 : 255; }

template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void __maxnreg__(chunk_max_registers(sizeof(scalar_t))) segment_chunks_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                      int64_t chunk, int64_t num_chunks, Groups groups, Rows rows,
                                      scalar_t* __restrict__ out, acc_t* __restrict__ carry) {
  const int64_t F = rows.num_features, E = rows.num_rows;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for (int64_t i = groups.first(); i < batch * num_chunks; i += groups.stride()) {
    const int64_t b = i / num_chunks, c = i - b * num_chunks;
    const int64_t e_begin = c * chunk, e_end = min(e_begin + chunk, E);
    const int64_t r_first = segment_of(ptr, num_segments, e_begin);
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      for (int64_t r = r_first; r < num_segments; ++r) {
        const int64_t seg_lo = ptr[r], seg_hi = ptr[r + 1];
        if (seg_lo >= e_end) break;
        if (seg_hi <= seg_lo) continue;  // empty segments are written by the fixup pass
        const int64_t lo = max(seg_lo, e_begin), hi = min(seg_hi, e_end);
        acc_t acc[VEC];
        init_acc<acc_t, R, VEC>(acc);
        fold_rows<acc_t, R, VEC>(rows, b, lo, hi, f0, acc);
        if (seg_lo >= e_begin && seg_hi <= e_end) {
          store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, seg_hi - seg_lo);
        } else {
          acc_t* slot = carry + ((b * num_chunks + c) * 2 + (r == r_first ? 0 : 1)) * F + f0;
#pragma unroll
          for (int k = 0; k < VEC; ++k) slot[k] = acc[k];
        }
      }
    }
  }
}

// Folds into acc the partials that chunks c0 .. c1 (c0 < c1) left in carry for one segment, at
// features f0 .. f0 + VEC of batch b, in chunk order: slot 1 of c0 when the segment starts inside
// c0, slot 0 everywhere else. Read from L2 (__ldcg): in the groups schedule other blocks of the same
// launch wrote them, and this SM's L1 may hold an older copy of their lines. UNROLL partials' loads
// are issued together: a segment over many chunks (a hub) then costs (c1 - c0 + 1) / UNROLL round
// trips to L2 rather than one per chunk, which bounds the fixup pass's time.
template <int UNROLL, typename acc_t, Reduce R, int VEC>
__device__ __forceinline__ void fold_carries(const acc_t* __restrict__ carry, int64_t b, int64_t num_chunks,
                                             int64_t F, int64_t f0, int64_t c0, int64_t c1, bool starts_inside,
                                             acc_t (&acc)[VEC]) {
  // Not unrolled: in the groups kernel's rare path (UNROLL 1), loads in flight cost the main loop's registers.
#pragma unroll 1
  for (int64_t c = c0; c <= c1; c += UNROLL) {
    acc_t part[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t chunk = c + u;
      const acc_t* slot = carry + ((b * num_chunks + chunk) * 2 + (chunk == c0 && starts_inside ? 1 : 0)) * F + f0;
#pragma unroll
      for (int k = 0; k < VEC; ++k) part[u][k] = chunk <= c1 ? __ldcg(slot + k) : acc_t(0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (c + u > c1) break;
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] = Reducer<R, acc_t>::update(acc[k], part[u][k]);
    }
  }
}

// Carries the fixup pass folds per round trip (see fold_carries).
constexpr int kFixupUnroll = 8;

// Pass 2 of the chunk and edges schedules: one group per segment; combines the carries of segments
// that cross chunk boundaries (chunks of `chunk` consecutive rows) and writes empty segments.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__global__ void segment_fixup_kernel(const int64_t* __restrict__ ptr, int64_t num_rows, int64_t num_segments,
                                     int64_t batch, int64_t num_features, int64_t chunk, int64_t num_chunks,
                                     Groups groups, const acc_t* __restrict__ carry, scalar_t* __restrict__ out) {
  const int64_t F = num_features;
  const int64_t tile = static_cast<int64_t>(groups.lanes) * VEC;
  for_each_segment(groups, ptr, num_segments, batch, num_rows, [&](int64_t b, int64_t r, int64_t lo, int64_t hi) {
    const bool empty = hi <= lo;
    const int64_t c0 = empty ? 0 : lo / chunk, c1 = empty ? 0 : min((hi - 1) / chunk, num_chunks - 1);
    if (!empty && c0 == c1) return;  // finished by its chunk
    for (int64_t f0 = static_cast<int64_t>(groups.lane()) * VEC; f0 < F; f0 += tile) {
      acc_t acc[VEC];
      init_acc<acc_t, R, VEC>(acc);
      if (!empty) fold_carries<kFixupUnroll, acc_t, R, VEC>(carry, b, num_chunks, F, f0, c0, c1, lo != c0 * chunk, acc);
      store_final<scalar_t, acc_t, R, VEC>(out + (b * num_segments + r) * F + f0, acc, hi - lo);
    }
  });
}

}  // namespace pyg_fast::cuda
