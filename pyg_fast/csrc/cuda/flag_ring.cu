// The pinned ring of flag slots (flag_ring.cuh) and the op that tells Python where it lies.
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <vector>

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
    const size_t bytes = kFlagRingSlots * kFlagSlotValues * sizeof(int64_t);
    void* host = nullptr;
    C10_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, 0, bytes);
    void* device = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    allocated = {static_cast<int64_t*>(host), static_cast<int64_t*>(device)};
  });
  return allocated;
}

std::vector<int64_t> flag_ring_layout() {
  return {reinterpret_cast<int64_t>(ring().host), kFlagRingSlots, kFlagSlotValues};
}

}  // namespace

int64_t* flag_ring() { return ring().device; }

}  // namespace pyg_fast::cuda

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // [host address, slots, flags a slot] of the ring the CUDA checks raise their flags in (their
  // `flag_slot` argument); CUDA builds only.
  m.def("flag_ring() -> int[]", &pyg_fast::cuda::flag_ring_layout);
}
