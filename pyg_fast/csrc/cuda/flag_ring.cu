// The pinned ring of flag slots (flag_ring.cuh) and the op that tells Python where it lies.
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "../common/flag_site.h"
#include "flag_ring.cuh"

namespace pyg_fast::cuda {
namespace {

struct Ring {
  int64_t* host = nullptr;
  int64_t* device = nullptr;
};

// Portable and mapped: every device writes it through one address (unified addressing).
const Ring& ring() {
  static Ring allocated;
  static std::once_flag once;
  std::call_once(once, [] {
    const size_t bytes = (kFlagRingSlots + kFlagSites) * kFlagSlotValues * sizeof(int64_t);
    void* host = nullptr;
    C10_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, 0, bytes);
    void* device = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    allocated = {static_cast<int64_t*>(host), static_cast<int64_t*>(device)};
  });
  return allocated;
}

struct Site {
  std::string name;
  int64_t num_src, num_dst;  // the sizes of its last call, for the message
};

std::mutex sites_mutex;
std::vector<Site> sites;
int64_t sites_used = 0;  // read by Python's poll (its address is in flag_ring_layout)

// Raises for the first site whose flags are raised, and lowers them. The caller holds sites_mutex.
void raise_site_flags_locked() {
  for (size_t i = 0; i < sites.size(); ++i) {
    volatile int64_t* flags = ring().host + (kFlagRingSlots + static_cast<int64_t>(i)) * kFlagSlotValues;
    for (int which = 0; which < 2; ++which) {
      if (flags[which] == 0) continue;
      flags[0] = flags[1] = 0;
      PF_CHECK_INDEX(false, site_message(sites[i].name, which, sites[i].num_src, sites[i].num_dst),
                     " (found by the kernel of a compiled or traced call, which does not wait for the device: "
                     "a later call raises, and that call's output skipped the invalid entries; "
                     "pyg_fast.check_errors() waits for it)");
    }
  }
}

void raise_site_flags() {
  const std::lock_guard<std::mutex> lock(sites_mutex);
  raise_site_flags_locked();
}

std::vector<int64_t> flag_ring_layout() {
  return {reinterpret_cast<int64_t>(ring().host), kFlagRingSlots, kFlagSlotValues,
          reinterpret_cast<int64_t>(&sites_used)};
}

}  // namespace

int64_t* flag_ring() { return ring().device; }

int64_t* site_flags(const std::string& site, int64_t num_src, int64_t num_dst) {
  const std::lock_guard<std::mutex> lock(sites_mutex);
  raise_site_flags_locked();
  size_t i = 0;
  while (i < sites.size() && sites[i].name != site) ++i;
  if (i == sites.size()) {
    PF_CHECK_VALUE(static_cast<int64_t>(i) < kFlagSites, "pyg_fast: more than ", kFlagSites,
                   " call sites of recorded range checks in one process");
    sites.push_back({site, num_src, num_dst});
    sites_used = static_cast<int64_t>(sites.size());
  }
  sites[i].num_src = num_src;
  sites[i].num_dst = num_dst;
  return ring().device + (kFlagRingSlots + static_cast<int64_t>(i)) * kFlagSlotValues;
}

}  // namespace pyg_fast::cuda

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // [host address, slots, flags a slot, address of the number of sites in use] of the ring the
  // CUDA checks raise their flags in (their `flag_slot` argument); the sites' slots follow the
  // ring's. CUDA builds only.
  m.def("flag_ring() -> int[]", &pyg_fast::cuda::flag_ring_layout);
  // Raises for a recorded call's raised flags (site_flags), for pyg_fast's poll.
  m.def("raise_site_flags() -> ()", &pyg_fast::cuda::raise_site_flags);
}
