// The edges schedule of the segment kernels (see segment_reduce.cuh).
// Torch-free.
#pragma once

#include "segment_chunk.cuh"

namespace pyg_fast::cuda {

// Edge-parallel schedule, pass 1 (GeoT's parallel reduction over the rows of many segments at
// once, for small F): one warp per chunk of `chunk` consecutive rows, whatever segments they belong
// to. The warp's lanes form 32 / lanes runs of `lanes` feature lanes (VEC features each); per step,
// run j walks kRunRows consecutive rows sequentially (their index and row loads issued together,
// contiguous per lane) and writes each segment that starts and ends inside it at once. What the run
// leaves open, the segment it starts in (its head) and the one it ends in (its tail), is combined
// across the warp's runs by one segmented scan per step keyed by segment, so a warp spends a few
// shuffles per run rather than per row, and no lane idles on a short segment (the row schedules give
// a short segment a whole group). The segment open at the end of a step carries into the next in
// registers; segments that cross a chunk leave partials in the chunk schedule's carry slots (same
// layout), which segment_fixup_kernel combines, as it writes the empty segments. Deterministic, no
// atomics. Requires ptr[0] == 0 and ptr[V] == E. The walk stops at the last segment with rows: a
// mini-batch's targets are the first of its nodes, and walking the 106 k empty segments after them
// one by one (boundary counts, then the close loop) took 12.4-12.5 ms, now 16 us, where the row
// schedule takes 7.4-7.6 us (216 k rows into 115 k segments, F = 1, H100).
constexpr int kRunRows = 8;
// Threads per block of the edges schedule, at most (the launcher checks). One-value vectors hold
// 3 blocks per SM: at 256 threads, at most 85 registers, 24 warps to hide the run loads' latency.
constexpr int kEdgesMaxThreads = 256;
constexpr int edges_min_blocks(int vec) { return vec == 1 ? 3 : 1; }

// Last r in [0, num_segments) with ptr[r] <= e, searched by the whole warp: 31 probes a round, so
// about log32(V) dependent loads instead of log2(V). Every lane returns the same r.
__device__ __forceinline__ int64_t warp_segment_of(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t e,
                                                   int lane) {
  int64_t lo = 0, hi = num_segments;  // invariant: answer in [lo, hi)
  while (hi - lo > 1) {
    // Probes lo < p_0 <= ... <= p_30 < hi; ptr non-decreasing makes the true ones a prefix.
    const auto probe = [&](int j) { return lo + 1 + (hi - lo - 1) * j / 31; };
    const bool below = lane < 31 && ptr[probe(lane)] <= e;
    const int k = __popc(__ballot_sync(kFullMask, below));
    const int64_t new_lo = k > 0 ? probe(k - 1) : lo, new_hi = k < 31 ? probe(k) : hi;
    lo = new_lo;
    hi = new_hi;
  }
  return lo;
}

// Number of the 32 non-decreasing values `bound` (one per lane) that are <= e, for this lane's e.
// Every shuffle is executed by all lanes (a shuffle behind a lane-dependent condition is undefined).
__device__ __forceinline__ int warp_count_at_most(int64_t bound, int64_t e) {
  int count = 0;
#pragma unroll
  for (int step = 16; step > 0; step /= 2)
    if (__shfl_sync(kFullMask, bound, count + step - 1) <= e) count += step;
  const int64_t last = __shfl_sync(kFullMask, bound, kWarpSize - 1);
  return count == 31 && last <= e ? 32 : count;
}

template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
__global__ void __launch_bounds__(kEdgesMaxThreads, edges_min_blocks(VEC)) segment_edges_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t batch,
                                     int64_t chunk, int64_t num_chunks, int lanes, Rows rows,
                                     scalar_t* __restrict__ out, acc_t* __restrict__ carry) {
  using Red = Reducer<R, acc_t>;
  const int lane = threadIdx.x % kWarpSize, feature_lane = lane % lanes, run = lane / lanes;
  const int runs = kWarpSize / lanes;
  const int last_run_lane = kWarpSize - lanes + feature_lane;  // this feature lane in the step's last run
  const int64_t F = rows.num_features, E = rows.num_rows, V = num_segments;
  const int64_t tile = static_cast<int64_t>(lanes) * VEC, step_rows = static_cast<int64_t>(runs) * kRunRows;
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  // Segments from V_rows on are empty (the fixup writes them); V_rows stands for "past the last row".
  const int64_t V_rows = E > 0 ? warp_segment_of(ptr, V, E - 1, lane) + 1 : 0;
  for (int64_t i = blockIdx.x * warps_per_block + threadIdx.x / kWarpSize; i < batch * num_chunks; i += warps) {
    const int64_t b = i / num_chunks, c = i - b * num_chunks;
    const int64_t e_begin = c * chunk, e_end = min(e_begin + chunk, E);
    const int64_t r_first = warp_segment_of(ptr, V, e_begin, lane);
    const bool first_inside = ptr[r_first] >= e_begin;  // r_first starts in this chunk
    for (int64_t f_base = 0; f_base < F; f_base += tile) {
      const int64_t f0 = f_base + static_cast<int64_t>(feature_lane) * VEC;
      const bool has_f = f0 < F;
      int64_t r_open = r_first;  // the segment open before the step (r_first at the chunk's start)
      acc_t open[VEC];           // its partial over this chunk's rows so far
      init_acc<acc_t, R, VEC>(open);
      for (int64_t base = e_begin; base < e_end; base += step_rows) {
        // Runs past the chunk's end are empty and sit at e_end, so the segment keys stay sorted.
        const int64_t run_lo = min(base + run * kRunRows, e_end), run_hi = min(run_lo + kRunRows, e_end);
        Vec<scalar_t, VEC> v[kRunRows];
        acc_t s[kRunRows];
        bool ok[kRunRows];
        if (has_f && run_hi - run_lo == kRunRows) {
          rows.template load_run<acc_t>(b, run_lo, f0, v, s, ok);
        } else {
#pragma unroll
          for (int u = 0; u < kRunRows; ++u) {
            ok[u] = has_f && run_lo + u < run_hi;
            if (ok[u]) {
              s[u] = rows.template scale<acc_t>(run_lo + u, f0);
              ok[u] = rows.load(b, run_lo + u, f0, v[u]);
            }
          }
        }
        // The run's head: r_open plus the boundaries ptr[k] <= run_lo after it, 32 at a time.
        // Segment V_rows stands for "past the last row" (run_lo == E).
        const int64_t step_last = min(base + (runs - 1) * kRunRows, e_end);
        int64_t head = r_open;
        for (int64_t k0 = r_open + 1; k0 <= V_rows; k0 += kWarpSize) {
          const int64_t bound = k0 + lane <= V_rows ? ptr[k0 + lane] : INT64_MAX;
          head += warp_count_at_most(bound, run_lo);
          if (__shfl_sync(kFullMask, bound, kWarpSize - 1) > step_last) break;
        }
        // Walk the run: r is the open segment, [r_lo, r_hi) its rows (r_lo unknown for the head).
        acc_t acc[VEC], head_acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] = run == 0 && head == r_open ? open[k] : Red::init();
        bool head_open = true;
        int64_t r = head, r_lo = 0, r_hi = head < V_rows ? ptr[head + 1] : E;
#pragma unroll
        for (int u = 0; u < kRunRows; ++u) {
          const int64_t e = run_lo + u;
          if (e >= run_hi) break;
          if (ok[u]) fold_vec<acc_t, R, Rows::kScaled>(acc, v[u], s[u]);
          while (r < V_rows && e + 1 >= r_hi) {  // segment r ends with row e (or is empty)
            if (head_open) {
#pragma unroll
              for (int k = 0; k < VEC; ++k) head_acc[k] = acc[k];
              head_open = false;
            } else if (r_hi > r_lo && has_f) {  // started and ended in this run; empty ones: fixup
              store_final<scalar_t, acc_t, R, VEC>(out + (b * V + r) * F + f0, acc, r_hi - r_lo);
            }
            init_acc<acc_t, R, VEC>(acc);
            ++r;
            r_lo = r_hi;
            r_hi = r < V_rows ? ptr[r + 1] : r_lo;
          }
        }
        // Segmented inclusive scan of the tails over the runs: each run ends with its tail segment's
        // rows from this chunk up to its own end.
        for (int d = 1; d < runs; d *= 2) {
          const int64_t other_r = __shfl_up_sync(kFullMask, r, d * lanes);
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const acc_t other = __shfl_up_sync(kFullMask, acc[k], d * lanes);
            if (run >= d && other_r == r) acc[k] = Red::update(other, acc[k]);
          }
        }
        // A head that ended here gets the previous run's tail when that is the same segment.
        const int64_t prev_r = __shfl_up_sync(kFullMask, r, lanes);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const acc_t prev = __shfl_up_sync(kFullMask, acc[k], lanes);
          if (!head_open && run > 0 && prev_r == head) head_acc[k] = Red::update(prev, head_acc[k]);
        }
        if (!head_open && has_f) {
          if (head != r_first || first_inside) {
            store_final<scalar_t, acc_t, R, VEC>(out + (b * V + head) * F + f0, head_acc,
                                                 ptr[head + 1] - ptr[head]);
          } else {  // r_first began before the chunk: slot 0
            acc_t* slot = carry + (b * num_chunks + c) * 2 * F + f0;
#pragma unroll
            for (int k = 0; k < VEC; ++k) slot[k] = head_acc[k];
          }
        }
        r_open = __shfl_sync(kFullMask, r, last_run_lane);
#pragma unroll
        for (int k = 0; k < VEC; ++k) open[k] = __shfl_sync(kFullMask, acc[k], last_run_lane);
      }
      // The segment still open at the chunk's end crosses into the next chunk (unless it starts
      // there): slot 0 if it is also the chunk's first segment, else slot 1.
      if (has_f && r_open < V_rows && ptr[r_open] < e_end) {
        acc_t* slot = carry + ((b * num_chunks + c) * 2 + (r_open == r_first ? 0 : 1)) * F + f0;
#pragma unroll
        for (int k = 0; k < VEC; ++k) slot[k] = open[k];
      }
    }
  }
}

}  // namespace pyg_fast::cuda
