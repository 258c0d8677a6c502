#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "../ops/gather_scatter.h"

namespace pyg_fast::cpu {
namespace {

// Features per thread at least: each thread owns a band of every row's features, so the threads
// never add into the same value and the edge loop needs no atomics or grouping.
constexpr int64_t kFeatureGrain = 16;

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
  int64_t raised[2] = {0, 0};
  std::vector<uint8_t> valid(E);
  std::vector<int64_t> counts(mean ? V : 0, 0);
  for (int64_t e = 0; e < E; ++e) {
    const bool src_ok = static_cast<uint64_t>(src ? src[e] : e) < static_cast<uint64_t>(N);
    const bool dst_ok = static_cast<uint64_t>(dst[e]) < static_cast<uint64_t>(V);
    if (!src_ok) raised[0] = 1;
    if (!dst_ok) raised[1] = 1;
    valid[e] = src_ok && dst_ok;
    if (valid[e] && mean) ++counts[dst[e]];
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gather_scatter", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    std::vector<acc_t> acc(V * F, acc_t(0));
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = weight ? weight->const_data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, F, kFeatureGrain, [&](int64_t f0, int64_t f1) {
      for (int64_t e = 0; e < E; ++e) {
        if (!valid[e]) continue;
        const scalar_t* row = xp + (src ? src[e] : e) * F;
        acc_t* target = acc.data() + dst[e] * F;
        for (int64_t f = f0; f < f1;) {  // one weight per head's run of features
          const int64_t end = std::min(f1, (f / D + 1) * D);
          const acc_t w = wp ? static_cast<acc_t>(wp[e * H + f / D]) : acc_t(1);
          for (; f < end; ++f) target[f] += w * static_cast<acc_t>(row[f]);
        }
      }
    });
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    scalar_t* d = divisor.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, V, 1024, [&](int64_t v0, int64_t v1) {
      for (int64_t v = v0; v < v1; ++v) {
        const acc_t c = mean ? static_cast<acc_t>(std::max<int64_t>(counts[v], 1)) : acc_t(1);
        for (int64_t f = 0; f < F; ++f) o[v * F + f] = static_cast<scalar_t>(acc[v * F + f] / c);
        if (mean) d[v] = static_cast<scalar_t>(c);
      }
    });
  });
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
