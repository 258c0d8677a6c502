// CPU traversal shared by the segment kernels: every output row (b, r) folds
// the rows ptr[r] .. ptr[r+1] of its segment into F accumulators.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../common/check.h"
#include "../common/reduce.h"

namespace pyg_fast::cpu {

// Tuning constants of the CPU kernels, measured on arxiv_like (2 cores, float32).
// Scalar operations per parallel task, large enough to hide scheduling costs.
constexpr int64_t kGrainSize = 32768;
// Rows are cut into this many ranges of equal work per thread, which threads claim one at a time:
// on a shared machine a thread that loses its core for a while leaves its later ranges to the
// others (no cost measured on a quiet machine, arxiv_like, 2 threads).
constexpr int64_t kTasksPerThread = 4;
// What an output row costs beyond its edges, in edges, when rows are split over threads: the
// accumulator set-up, the write and the mispredicted exit of the edge loop.
constexpr int64_t kRowCostInEdges = 2;
// Gathered rows (x[src[e]]) are read in random order, which the hardware prefetchers cannot
// follow: the kernels prefetch the row of the edge that lies about kPrefetchBytes of rows ahead
// (F = 16..128 float32: 1.5-3x faster). Rows under kPrefetchMinRowBytes are not prefetched: the
// extra index load costs more than it saves there (F = 1: 3.3 -> 4.4 ms, one thread).
constexpr int64_t kCacheLine = 64;
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kPrefetchMinRowBytes = kCacheLine;
constexpr int64_t kPrefetchMaxEdges = 64;

// Edges between a gathered row's prefetch and its use; 0: no prefetch.
inline int64_t prefetch_distance(int64_t row_bytes) {
  if (row_bytes < kPrefetchMinRowBytes) return 0;
  return std::clamp<int64_t>(kPrefetchBytes / row_bytes, 1, kPrefetchMaxEdges);
}

// Threads for a pass over E edges of F values into V output rows where each thread owns a range
// of the rows (share_start) and walks every edge: no two threads write one row, and each row's
// edges are folded in edge order whatever the thread count. A thread for every `grain` values
// begun. kFoldGrain, for a fold of a few operations a value: up to that many, a second thread cost
// more than it saved (2 threads against 1, random edges, gather_scatter, scatter without a
// source, scatter_extremum, ms: 1.17 M edges x 64 (75 M values) 58-66 against 64-102; x 16 (19 M)
// 15-17 against 10-15; 150 k x 64 (9.6 M) 4.1-5.3 against 3.4-4.7).
constexpr int64_t kFoldGrain = int64_t(1) << 25;
inline int64_t owner_threads(int64_t num_edges, int64_t num_features, int64_t num_rows, int64_t grain) {
  const int64_t values = num_edges * std::max<int64_t>(num_features, 1);
  return std::clamp<int64_t>((values + grain - 1) / grain, 1,
                             std::min<int64_t>(at::get_num_threads(), std::max<int64_t>(num_rows, 1)));
}

// owner_threads for a pass whose work per edge is a fold of `row_bytes`: rows under a cache line
// take one thread, as each thread's test whether it owns an edge's row is a branch it mispredicts
// on every other edge, which costs more than such a fold (scatter_extremum, 1.17 M rows of 4
// floats: 7.4 ms on two threads, 5.9-6.1 on one).
inline int64_t fold_threads(int64_t num_edges, int64_t num_features, int64_t num_rows, int64_t row_bytes,
                            int64_t grain) {
  return row_bytes < kCacheLine ? 1 : owner_threads(num_edges, num_features, num_rows, grain);
}

// The first row of thread t's share of num_rows rows among `threads`.
inline int64_t share_start(int64_t num_rows, int64_t t, int64_t threads) { return num_rows * t / threads; }

// Prefetches the cache lines of [p, p + bytes).
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kCacheLine - 1);
  const auto end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t line = first; line < end; line += kCacheLine)
    __builtin_prefetch(reinterpret_cast<const void*>(line));
}

// fold(acc, b, r, e, nf) folds edge e of row r into acc[0..nf) and returns true, or returns false
// when the edge's data is out of range (the caller reports it: walk_segments returns false);
// write(acc, b, r, count, nf) stores a finished row. nf is the feature count: a
// std::integral_constant for small counts, so that the feature loops of the callers unroll and
// the accumulators live in registers (per-edge overhead dominates at small F), else an int64_t.
// Folds run one edge after the other: several accumulator sets per row (independent add chains)
// measured slower on arxiv_like (7 edges per row: the extra loop exits mispredict, and
// out-of-order execution overlaps consecutive rows anyway).
template <typename Features>
constexpr int64_t fixed_count() {
  if constexpr (std::is_integral_v<Features>) {
    return 0;
  } else {
    return Features::value;
  }
}

// Bounds of `tasks` ranges of the rows [0, batch * num_rows) of similar work (edges plus
// kRowCostInEdges per row), so that threads finish together on skewed (power-law) degrees.
// Ascending and in range whatever ptr holds (the walker reports a malformed ptr).
inline std::vector<int64_t> split_rows(const int64_t* ptr, int64_t batch, int64_t num_rows,
                                       int64_t num_edges, int64_t tasks) {
  const int64_t total_rows = batch * num_rows;
  std::vector<int64_t> bounds(tasks + 1, total_rows);
  bounds[0] = 0;
  auto edges_before = [&](int64_t r) { return std::clamp<int64_t>(ptr[r] - ptr[0], 0, num_edges); };
  const int64_t batch_work = edges_before(num_rows) + num_rows * kRowCostInEdges;
  auto work_before = [&](int64_t i) {  // of the flat rows before i
    const int64_t b = i / num_rows, r = i % num_rows;
    return b * batch_work + edges_before(r) + r * kRowCostInEdges;
  };
  for (int64_t t = 1; t < tasks; ++t) {
    const int64_t target = batch * batch_work / tasks * t;
    int64_t lo = bounds[t - 1], hi = total_rows;  // the first row whose work_before reaches target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (work_before(mid) < target) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    bounds[t] = lo;
  }
  return bounds;
}

// Folds every segment and writes it; false if a fold failed. Rows are cut into up to
// kTasksPerThread ranges of equal work per thread (split_rows), claimed by the threads in turn.
template <typename acc_t, Reduce R, typename Features, typename Fold, typename Write>
bool walk_segments(const int64_t* ptr, int64_t batch, int64_t num_rows, Features nf, int64_t num_edges,
                   const Fold& fold, const Write& write) {
  const int64_t num_features = nf;
  const int64_t total_rows = batch * num_rows;
  if (total_rows == 0) return true;
  const int64_t work = batch * (num_edges + num_rows * kRowCostInEdges) * std::max<int64_t>(1, num_features);
  const int64_t threads = std::clamp<int64_t>(work / kGrainSize, 1, at::get_num_threads());
  const int64_t tasks = std::clamp<int64_t>(work / kGrainSize, 1, threads * kTasksPerThread);
  const std::vector<int64_t> bounds = split_rows(ptr, batch, num_rows, num_edges, tasks);
  std::atomic<int64_t> next_task{0};
  std::atomic<bool> bad_ptr{false}, bad_fold{false};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    // A fixed count gets a local array, which the compiler keeps in registers (it cannot alias
    // the inputs); other counts use the heap, once per thread.
    constexpr int64_t kFixed = fixed_count<Features>();
    acc_t fixed[kFixed > 0 ? kFixed : 1];
    std::vector<acc_t> dynamic(kFixed > 0 ? 0 : num_features);
    acc_t* acc = kFixed > 0 ? fixed : dynamic.data();
    // Failures are noted in locals: an atomic store in the loop would make the compiler reload
    // every captured variable after it.
    bool ptr_ok = true, folds_ok = true;
    for (int64_t task = next_task++; task < tasks; task = next_task++) {
      const int64_t begin = bounds[task], end = bounds[task + 1];
      int64_t b = begin / num_rows, r = begin % num_rows;
      for (int64_t i = begin; i < end; ++i, ++r) {
        if (r == num_rows) {
          r = 0;
          ++b;
        }
        const int64_t lo = ptr[r], hi = ptr[r + 1];
        if (lo < 0 || hi < lo || hi > num_edges) {
          ptr_ok = false;
          continue;
        }
        for (int64_t f = 0; f < nf; ++f) acc[f] = Reducer<R, acc_t>::init();
        for (int64_t e = lo; e < hi; ++e) folds_ok &= fold(acc, b, r, e, nf);
        write(acc, b, r, hi - lo, nf);
      }
    }
    if (!ptr_ok) bad_ptr = true;
    if (!folds_ok) bad_fold = true;
  });
  PF_CHECK_VALUE(!bad_ptr, "pyg_fast: 'ptr' must be non-decreasing, start at >= 0 and end at <= ",
                 num_edges, " (the number of rows being reduced)");
  return !bad_fold;
}

// Largest feature count compiled as a constant (counts 1, 2, 4, 8, 16 up to it). Max/min stop at
// 4: unrolled, their selects compile to scalar code, which loses to the vectorised runtime loop
// from F = 8 on (arxiv_like max, one thread: F = 1 7.6 -> 2.4 ms, but F = 16 6.2 -> 13 ms).
template <Reduce R>
constexpr int64_t kLargestFixedCount = (R == Reduce::Max || R == Reduce::Min) ? 4 : 16;

// fn(nf) with nf = num_features as a std::integral_constant where it is one of the compiled
// counts up to kLargest, else as an int64_t.
template <int64_t kLargest, typename Fn>
decltype(auto) with_feature_count(int64_t num_features, const Fn& fn) {
  auto fixed = [&](auto count) -> decltype(auto) {
    if constexpr (decltype(count)::value <= kLargest) {
      return fn(count);
    } else {
      return fn(num_features);
    }
  };
  switch (num_features) {
    case 1: return fixed(std::integral_constant<int64_t, 1>{});
    case 2: return fixed(std::integral_constant<int64_t, 2>{});
    case 4: return fixed(std::integral_constant<int64_t, 4>{});
    case 8: return fixed(std::integral_constant<int64_t, 8>{});
    case 16: return fixed(std::integral_constant<int64_t, 16>{});
    default: return fn(num_features);
  }
}

template <typename acc_t, Reduce R, typename Fold, typename Write>
bool for_each_segment(const int64_t* ptr, int64_t batch, int64_t num_rows, int64_t num_features,
                      int64_t num_edges, const Fold& fold, const Write& write) {
  return with_feature_count<kLargestFixedCount<R>>(num_features, [&](auto nf) {
    return walk_segments<acc_t, R>(ptr, batch, num_rows, nf, num_edges, fold, write);
  });
}

}  // namespace pyg_fast::cpu
