// CPU traversal shared by the segment kernels: every output row (b, r) folds
// the rows ptr[r] .. ptr[r+1] of its segment into F accumulators.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "../common/check.h"
#include "../common/reduce.h"

namespace pyg_fast::cpu {

// Scalar operations per parallel task, large enough to hide scheduling costs.
constexpr int64_t kGrainSize = 32768;

// fold(acc, b, r, e) folds edge e of row r into acc[0..F); write(acc, b, r, count) stores a
// finished row. Rows are split over threads in chunks of similar work.
template <typename acc_t, Reduce R, typename Fold, typename Write>
void for_each_segment(const int64_t* ptr, int64_t batch, int64_t num_rows, int64_t num_features,
                      int64_t num_edges, const Fold& fold, const Write& write) {
  const int64_t avg_degree = num_rows > 0 ? num_edges / num_rows + 1 : 1;
  const int64_t grain =
      std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, avg_degree * num_features));
  std::atomic<bool> bad_ptr{false};
  at::parallel_for(0, batch * num_rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc(num_features);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / num_rows, r = i % num_rows;
      const int64_t lo = ptr[r], hi = ptr[r + 1];
      if (lo < 0 || hi < lo || hi > num_edges) {
        bad_ptr = true;
        continue;
      }
      std::fill(acc.begin(), acc.end(), Reducer<R, acc_t>::init());
      for (int64_t e = lo; e < hi; ++e) fold(acc.data(), b, r, e);
      write(acc.data(), b, r, hi - lo);
    }
  });
  PF_CHECK_VALUE(!bad_ptr, "pyg_fast: 'ptr' must be non-decreasing, start at >= 0 and end at <= ",
                    num_edges, " (the number of rows being reduced)");
}

}  // namespace pyg_fast::cpu
