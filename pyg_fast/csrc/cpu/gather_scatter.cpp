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
#include <tuple>
#include <vector>

#include "../ops/gather_scatter.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// Each thread owns a range of output rows and walks every edge, adding those into its rows
// (owner_threads): no atomics, and the edges of a row added in order, so the result does not
// depend on the thread count. The rows an edge reads and writes lie in random places: they are
// prefetched a few edges ahead (segment_walk.h), which the hardware cannot do. 1.17 M random
// edges, sum, ms, against a band of features a thread without prefetches: F = 16 60-72 -> 16-17
// (one thread), F = 128 222-252 -> 117-122 (two; torch's index_select + index_add_: 346-372).
std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_scatter(const at::Tensor& x,
                                                              const std::optional<at::Tensor>& src_index,
                                                              const at::Tensor& dst_index,
                                                              const std::optional<at::Tensor>& weight,
                                                              int64_t num_rows, bool mean, int64_t flag_slot,
                                                              c10::string_view site) {
  check_gather_scatter_args(x, src_index, dst_index, weight, num_rows);
  const int64_t N = x.size(0), F = x.size(1), E = dst_index.numel(), V = num_rows;
  const int64_t H = weight ? weight->size(1) : 1, D = F / H;
  auto flags = at::zeros({flag_slot == kCheckedBefore || at_site(flag_slot) ? 0 : 2}, dst_index.options());
  auto out = at::empty({V, F}, x.options());
  auto divisor = at::empty({mean ? V : 0}, x.options());
  const int64_t* dst = dst_index.const_data_ptr<int64_t>();
  const int64_t* src = src_index ? src_index->const_data_ptr<int64_t>() : nullptr;
  const int64_t threads = owner_threads(E, F, V, kFoldGrain);
  std::atomic<bool> src_raised{false}, dst_raised{false};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gather_scatter", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr bool kDirect = std::is_same_v<scalar_t, acc_t>;  // float, double: summed in the output
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = weight ? weight->const_data_ptr<scalar_t>() : nullptr;
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    scalar_t* d = divisor.mutable_data_ptr<scalar_t>();
    const int64_t distance = F > 0 ? prefetch_distance(F * static_cast<int64_t>(sizeof(scalar_t))) : 0;
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t v0 = share_start(V, t, threads), v1 = share_start(V, t + 1, threads), rows = v1 - v0;
        std::vector<acc_t> local(kDirect ? 0 : rows * F, acc_t(0));
        acc_t* acc = kDirect ? reinterpret_cast<acc_t*>(o + v0 * F) : local.data();
        if constexpr (kDirect) std::fill(acc, acc + rows * F, acc_t(0));
        std::vector<int64_t> counts(mean ? rows : 0, 0);
        bool src_bad = false, dst_bad = false;  // locals: an atomic store in the loop costs reloads
        for (int64_t e = 0; e < E; ++e) {
          if (distance > 0 && e + distance < E) {
            const int64_t ahead = dst[e + distance];
            const int64_t source = src ? src[e + distance] : e + distance;
            if (ahead >= v0 && ahead < v1 && static_cast<uint64_t>(source) < static_cast<uint64_t>(N)) {
              prefetch_bytes(xp + source * F, F * static_cast<int64_t>(sizeof(scalar_t)));
              prefetch_bytes(acc + (ahead - v0) * F, F * static_cast<int64_t>(sizeof(acc_t)));
            }
          }
          const int64_t r = dst[e];
          const int64_t s = src ? src[e] : e;
          const bool src_ok = static_cast<uint64_t>(s) < static_cast<uint64_t>(N);
          if (static_cast<uint64_t>(r) >= static_cast<uint64_t>(V)) {  // no thread's row: the first reports it
            if (t == 0) {
              dst_bad = true;
              src_bad |= !src_ok;
            }
            continue;
          }
          if (r < v0 || r >= v1) continue;
          if (!src_ok) {
            src_bad = true;
            continue;
          }
          if (mean) ++counts[r - v0];
          const scalar_t* row = xp + s * F;
          acc_t* target = acc + (r - v0) * F;
          if (wp == nullptr) {
            for (int64_t f = 0; f < F; ++f) target[f] += static_cast<acc_t>(row[f]);
            continue;
          }
          for (int64_t h = 0; h < H; ++h) {  // one weight per head's run of features
            const acc_t w = static_cast<acc_t>(wp[e * H + h]);
            for (int64_t f = h * D; f < (h + 1) * D; ++f) target[f] += w * static_cast<acc_t>(row[f]);
          }
        }
        if (mean || !kDirect) {
          for (int64_t r = 0; r < rows; ++r) {
            const acc_t c = mean ? static_cast<acc_t>(std::max<int64_t>(counts[r], 1)) : acc_t(1);
            scalar_t* row = o + (v0 + r) * F;
            for (int64_t f = 0; f < F; ++f) row[f] = static_cast<scalar_t>(acc[r * F + f] / c);
            if (mean) d[v0 + r] = static_cast<scalar_t>(c);
          }
        }
        if (src_bad) src_raised = true;
        if (dst_bad) dst_raised = true;
      }
    });
  });
  const int64_t raised[2] = {src_raised ? 1 : 0, dst_raised ? 1 : 0};
  if (at_site(flag_slot)) {  // a recorded call: no host code reads the flags after it
    for (int which = 0; which < 2; ++which) {
      PF_CHECK_INDEX(!raised[which], site_message(text(site), which, N, V));
    }
  }
  if (flags.numel() > 0) std::copy(raised, raised + 2, flags.mutable_data_ptr<int64_t>());
  return {out, divisor, flags};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("gather_scatter", &gather_scatter); }

}  // namespace pyg_fast::cpu
