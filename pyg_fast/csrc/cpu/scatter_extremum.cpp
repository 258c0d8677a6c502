// CPU kernels of scatter_extremum and its backward: passes over the rows (their segments come in
// any order).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../ops/scatter_extremum.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// Each thread owns a range of output rows and walks every row of src, folding those of its
// segments in row order (the same result on any thread count), their targets prefetched a few
// rows ahead (segment_walk.h). Against one thread without prefetches, ms, torch's scatter_reduce
// (amax, include_self=False) beside: 1.17 M rows into 169 k segments, F = 64 133-136 -> 56-64 (two
// threads; torch 68-98), F = 16 25-31 -> 10-11 (one; torch 26-48); 60 k rows of 64 6.1-9.7 ->
// 1.0-1.3 (torch 1.6-3.1).
std::tuple<at::Tensor, at::Tensor> scatter_extremum(const at::Tensor& src, const at::Tensor& index, int64_t num_rows,
                                                    bool is_max, int64_t /*flag_slot*/) {
  check_scatter_extremum_args(src, index, num_rows);
  const int64_t E = src.size(0), F = src.size(1), V = num_rows;
  auto out = at::empty({V, F}, src.options());
  auto flags = at::zeros({1}, index.options());
  const at::Tensor values = src.contiguous();
  const int64_t* d = index.const_data_ptr<int64_t>();
  const int64_t threads = fold_threads(E, F, V, F * src.element_size(), kFoldGrain);
  std::atomic<bool> raised{false};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr bool kDirect = std::is_same_v<scalar_t, acc_t>;  // float, double: folded in the output
    const scalar_t* s = values.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    const acc_t start = is_max ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    const int64_t distance = F > 0 ? prefetch_distance(F * static_cast<int64_t>(sizeof(acc_t))) : 0;
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t v0 = share_start(V, t, threads), v1 = share_start(V, t + 1, threads), rows = v1 - v0;
        std::vector<acc_t> local(kDirect ? 0 : rows * F);
        acc_t* acc = kDirect ? reinterpret_cast<acc_t*>(o + v0 * F) : local.data();
        std::fill(acc, acc + rows * F, start);
        std::vector<char> seen(rows, 0);
        bool bad = false;  // a local: an atomic store in the loop costs reloads
        for (int64_t e = 0; e < E; ++e) {
          if (distance > 0 && e + distance < E) {
            const int64_t ahead = d[e + distance];
            if (ahead >= v0 && ahead < v1) {
              prefetch_bytes(acc + (ahead - v0) * F, F * static_cast<int64_t>(sizeof(acc_t)));
            }
          }
          const int64_t r = d[e];
          if (static_cast<uint64_t>(r) >= static_cast<uint64_t>(V)) {  // no thread's row: the first reports it
            bad |= t == 0;
            continue;
          }
          if (r < v0 || r >= v1) continue;
          seen[r - v0] = 1;
          acc_t* row = acc + (r - v0) * F;
          const scalar_t* value = s + e * F;
          for (int64_t f = 0; f < F; ++f) {
            const acc_t v = static_cast<acc_t>(value[f]);
            row[f] = is_max ? std::max(row[f], v) : std::min(row[f], v);
          }
        }
        for (int64_t r = 0; r < rows; ++r) {  // an empty segment gives 0
          scalar_t* target = o + (v0 + r) * F;
          if (!seen[r]) {
            std::fill(target, target + F, scalar_t(0));
          } else if constexpr (!kDirect) {
            for (int64_t f = 0; f < F; ++f) target[f] = static_cast<scalar_t>(acc[r * F + f]);
          }
        }
        if (bad) raised = true;
      }
    });
  });
  if (raised) flags.fill_(1);
  return {out, flags};
}

// Two passes: the rows equal to their segment's extremum marked and counted per feature (each
// thread owning a range of segments, as the forward), then grad_out split among the marked rows
// (threads over rows, the segments' rows prefetched). The marks spare the second pass a reread of
// the extremum's rows, in random order. ms (kFoldGrain's threads): 1 M rows of 64 features into
// 100 k segments 593 -> 264-338 (torch's composition of gathers, index_add and where: 883), 200 k
// rows of 16 into 20 k 19.1 -> 8.7-14 (torch: 23), 1.17 M rows of 4 90.8 -> 33-56; threads over
// bands of features and no prefetch before.
at::Tensor scatter_extremum_backward(const at::Tensor& grad_out, const at::Tensor& src, const at::Tensor& index,
                                     const at::Tensor& out) {
  check_scatter_extremum_backward_args(grad_out, src, index, out);
  const int64_t E = src.size(0), F = src.size(1), V = out.size(0);
  auto grad_src = at::zeros({E, F}, src.options());
  const int64_t* d = index.const_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_extremum_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    const scalar_t* o = out.const_data_ptr<scalar_t>();
    const scalar_t* g = grad_out.const_data_ptr<scalar_t>();
    scalar_t* gs = grad_src.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> ties(V * F, acc_t(0));
    std::vector<uint8_t> hit(E * F, 0);
    const int64_t threads = fold_threads(E, F, V, F * src.element_size(), kFoldGrain);
    const int64_t distance = F > 0 ? prefetch_distance(F * static_cast<int64_t>(sizeof(scalar_t))) : 0;
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t v0 = share_start(V, t, threads), v1 = share_start(V, t + 1, threads);
        for (int64_t e = 0; e < E; ++e) {
          if (distance > 0 && e + distance < E) {
            const int64_t ahead = d[e + distance];
            if (ahead >= v0 && ahead < v1) {
              prefetch_bytes(o + ahead * F, F * static_cast<int64_t>(sizeof(scalar_t)));
              prefetch_bytes(ties.data() + ahead * F, F * static_cast<int64_t>(sizeof(acc_t)));
            }
          }
          const int64_t r = d[e];
          if (r < v0 || r >= v1) continue;  // out of range too: the forward reported it
          for (int64_t f = 0; f < F; ++f)
            if (static_cast<acc_t>(s[e * F + f]) == static_cast<acc_t>(o[r * F + f])) {
              hit[e * F + f] = 1;
              ties[r * F + f] += acc_t(1);
            }
        }
      }
    });
    at::parallel_for(0, E, 1024, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        if (distance > 0 && e + distance < e1) {
          const int64_t ahead = d[e + distance];
          if (ahead >= 0 && ahead < V) {
            prefetch_bytes(g + ahead * F, F * static_cast<int64_t>(sizeof(scalar_t)));
            prefetch_bytes(ties.data() + ahead * F, F * static_cast<int64_t>(sizeof(acc_t)));
          }
        }
        for (int64_t f = 0; f < F; ++f)
          if (hit[e * F + f])
            gs[e * F + f] = static_cast<scalar_t>(static_cast<acc_t>(g[d[e] * F + f]) / ties[d[e] * F + f]);
      }
    });
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("scatter_extremum", &scatter_extremum);
  m.impl("scatter_extremum_backward", &scatter_extremum_backward);
}

}  // namespace pyg_fast::cpu
