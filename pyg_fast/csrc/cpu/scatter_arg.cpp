// CPU kernel of scatter_arg: rows in order, so the first match of a value is its row.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <algorithm>

#include "../common/segment_arg_reduce.h"
#include "../ops/scatter_arg.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// A task is one batch's range of output rows (owner_threads): it walks every row of src, keeping
// the first that holds its segments' extremum, the rows it reads and writes prefetched a few rows
// ahead. Tasks over bands of 16 features left F = 16 to one thread. 1.17 M rows into 169 k
// segments, 2 threads, ms: F = 16 296-310 -> 50-56, F = 64 639-738 -> 226-230, F = 4 62-72 -> 34-42.
at::Tensor scatter_arg(const at::Tensor& src, const at::Tensor& index, const at::Tensor& out) {
  check_scatter_arg_args(src, index, out);
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = out.size(1);
  auto arg = at::full({B, V, F}, E, index.options());
  if (src.numel() == 0) return arg;
  // kGrainSize: a compare and a conditional store a value pays a second thread from far fewer values
  // than the folds (Cora's 10.6 k edges x 16: 0.47-0.55 ms on two threads, 0.80 on one)
  const int64_t threads = fold_threads(E, F, V, F * static_cast<int64_t>(sizeof(int64_t)), kGrainSize);
  const int64_t* idx = index.const_data_ptr<int64_t>();
  int64_t* a = arg.mutable_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_arg", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    const scalar_t* o = out.const_data_ptr<scalar_t>();
    const int64_t distance = prefetch_distance(F * static_cast<int64_t>(sizeof(int64_t)));
    at::parallel_for(0, B * threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / threads, t = task % threads;
        const int64_t v0 = share_start(V, t, threads), v1 = share_start(V, t + 1, threads);
        const scalar_t* best_rows = o + b * V * F;
        int64_t* arg_rows = a + b * V * F;
        for (int64_t j = 0; j < E; ++j) {
          if (distance > 0 && j + distance < E) {
            const int64_t ahead = idx[j + distance];
            if (ahead >= v0 && ahead < v1) {
              prefetch_bytes(best_rows + ahead * F, F * static_cast<int64_t>(sizeof(scalar_t)));
              prefetch_bytes(arg_rows + ahead * F, F * static_cast<int64_t>(sizeof(int64_t)));
            }
          }
          const int64_t v = idx[j];
          if (v < v0 || v >= v1) continue;  // out of range too: no row
          const scalar_t* value = s + (b * E + j) * F;
          const scalar_t* best = best_rows + v * F;
          int64_t* first = arg_rows + v * F;
          for (int64_t f = 0; f < F; ++f) {
            if (first[f] == E && holds_extremum(static_cast<acc_t>(value[f]), static_cast<acc_t>(best[f]))) first[f] = j;
          }
        }
      }
    });
  });
  return arg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("scatter_arg", &scatter_arg); }

}  // namespace pyg_fast::cpu
