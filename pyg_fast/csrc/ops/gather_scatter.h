// Schema-level argument checks of gather_scatter, shared by its CPU and CUDA kernels.
#pragma once

#include <c10/util/Optional.h>

#include <string>

#include "../common/check.h"

namespace pyg_fast {

// flag_slot of a call whose indices were checked by another op (its forward's, a range check):
// no flags are zeroed or raised, and they come back empty. Out-of-range edges are still skipped.
constexpr int64_t kCheckedBefore = -2;
// flag_slot of a recorded call (torch.compile, torch.jit.trace), which no host code runs beside to
// hand it a slot of the ring: the call's `site` names its ends ('src name|src size name|dst
// name|dst size name'). On the CPU the call raises at once; on CUDA its kernel raises the flags in
// the ring slot kept for that site, and the next such call (or pyg_fast's next eager call) raises.
// A separate range-check op a step cost about 70 us of host time in a compiled step (H200 host).
constexpr int64_t kAtSite = -3;
// kAtSite where config.validate is "sync": on CUDA the call waits for its kernel and raises at once.
constexpr int64_t kAtSiteSync = -4;
inline bool at_site(int64_t flag_slot) { return flag_slot == kAtSite || flag_slot == kAtSiteSync; }

// The message of flag `which` (0: the source, 1: the destination) of `site` (kAtSite).
inline std::string site_message(const std::string& site, int which, int64_t num_src, int64_t num_dst) {
  std::string part[4];
  size_t start = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t end = i < 3 ? site.find('|', start) : std::string::npos;
    part[i] = site.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? site.size() : end + 1;
  }
  return message("pyg_fast: '", part[2 * which], "' holds values outside [0, ", which == 0 ? num_src : num_dst, ") (",
                 part[2 * which + 1], ")");
}

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
