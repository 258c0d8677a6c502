// The flag_slot of a recorded call and its message, shared by the ops that take one and the CUDA
// flag ring (cuda/flag_ring.cu) that keeps its slot.
#pragma once

#include <cstdint>
#include <string>

#include "check.h"

namespace pyg_fast {

// flag_slot of a recorded call (torch.compile, torch.jit.trace), which no host code runs beside to
// hand it a slot of the ring: the call's `site` names its ends ('src name|src size name|dst
// name|dst size name'). On the CPU the call raises at once; on CUDA its kernel raises the flags in
// the ring slot kept for that site, and the next such call (or pyg_fast's next eager call) raises.
// A separate range-check op a step cost about 70 us of host time in a compiled step (H200 host).
constexpr int64_t kAtSite = -3;
// kAtSite where config.validate is "sync": on CUDA the call waits for its kernel and raises at once.
constexpr int64_t kAtSiteSync = -4;
inline bool at_site(int64_t flag_slot) { return flag_slot == kAtSite || flag_slot == kAtSiteSync; }

// The message of flag `which` (0: the source, 1: the destination) of `site` (kAtSite), worded as
// the eager checks' (pyg_fast.ops._layout.range_message), which tests match on either route.
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

}  // namespace pyg_fast
