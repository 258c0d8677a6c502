// Schema-level argument checks of gather_scatter, shared by its CPU and CUDA kernels.
#pragma once

#include <c10/util/Optional.h>

#include "../common/check.h"
#include "../common/flag_site.h"

namespace pyg_fast {

// flag_slot of a call whose indices were checked by another op (its forward's, a range check):
// no flags are zeroed or raised, and they come back empty. Out-of-range edges are still skipped.
constexpr int64_t kCheckedBefore = -2;

// x: [N, F]; src_index: optional [E] int64 (absent: N == E); dst_index: [E] int64; weight:
// optional [E, H], H | F.
inline void check_gather_scatter_args(const at::Tensor& x, const std::optional<at::Tensor>& src_index,
                                      const at::Tensor& dst_index, const std::optional<at::Tensor>& weight,
                                      int64_t num_rows) {
  check_floating(x, "x");
  PF_CHECK_VALUE(x.dim() == 2, "pyg_fast: gather_scatter expects 'x' viewed as [N, F], got ", x.sizes());
  check_index(dst_index, "dst_index");
  check_same_device(x, dst_index, "x", "dst_index");
  const int64_t E = dst_index.numel();
  if (src_index.has_value()) {
    check_index(*src_index, "src_index");
    check_same_device(x, *src_index, "x", "src_index");
    PF_CHECK_VALUE(src_index->numel() == E, "pyg_fast: 'src_index' has ", src_index->numel(),
                   " entries but 'dst_index' has ", E);
  } else {
    PF_CHECK_VALUE(x.size(0) == E, "pyg_fast: without 'src_index', 'x' must have a row per entry of "
                   "'dst_index' (", E, "), got ", x.size(0));
  }
  PF_CHECK_VALUE(num_rows >= 0, "pyg_fast: num_rows must be non-negative, got ", num_rows);
  if (weight.has_value()) check_edge_weight(*weight, x, E, x.size(1));
}

}  // namespace pyg_fast
