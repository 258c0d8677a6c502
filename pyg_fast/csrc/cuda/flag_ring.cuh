// Flags that kernels write straight into pinned host memory mapped into every device's address
// space: a ring of slots that pyg_fast.ops._deferred hands out, one a check, and reads where it
// lies, with no copy and no event a call (a report's copy and event cost 60-110 us of host time a
// call on a new graph, H100 host).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "../common/check.h"
#include "coo_launch.cuh"

namespace pyg_fast::cuda {

constexpr int64_t kFlagRingSlots = 4096;
constexpr int64_t kFlagSlotValues = 8;
// Slots after the ring's, one for each site of a recorded call (kAtSite in common/flag_site.h).
constexpr int64_t kFlagSites = 64;

// The ring's device address (allocated and zeroed on first use).
int64_t* flag_ring();

// Where the kernels of a recorded call at `site` raise its two flags (a slot kept for the site),
// with the sizes its message names. Raises first (IndexError) for any site's raised flags.
int64_t* site_flags(const std::string& site, int64_t num_src, int64_t num_dst);

struct FlagBuffer {
  at::Tensor tensor;  // what the op returns as its flags
  int64_t* data;      // where its kernels raise them
};

// Slot `slot` of the ring, where a call's kernels raise its `count` flags (zeroed by the host that
// handed it out); null for slot -1, where they raise none.
inline int64_t* flag_slot_data(int64_t count, int64_t slot) {
  if (slot < 0) return nullptr;
  PF_CHECK_VALUE(slot < kFlagRingSlots && count <= kFlagSlotValues, "pyg_fast: flag_slot ", slot,
                 " is outside the ring of ", kFlagRingSlots, " slots of ", kFlagSlotValues, " flags");
  return flag_ring() + slot * kFlagSlotValues;
}

// Where a call's kernels raise its `count` flags: slot `slot` of the ring (the returned tensor is
// then empty), or for slot -1 a zeroed device tensor.
inline FlagBuffer flag_buffer(int64_t count, int64_t slot, const at::TensorOptions& options) {
  if (slot < 0) {
    at::Tensor flags = zeros_async({count}, options);
    return {flags, flags.mutable_data_ptr<int64_t>()};
  }
  return {at::empty({0}, options), flag_slot_data(count, slot)};
}

}  // namespace pyg_fast::cuda
