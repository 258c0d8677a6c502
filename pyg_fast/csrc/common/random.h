// Counter-based random numbers for host and device code: a draw is a hash of a key and a counter
// (splitmix64's output function), with no generator state, so a CPU kernel and a CUDA kernel that
// include this header draw the same numbers for the same key. Torch-free.
#pragma once

#include <cstdint>

#include "reduce.h"  // PF_HOST_DEVICE

namespace pyg_fast {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;  // splitmix64's increment

PF_HOST_DEVICE uint64_t mix64(uint64_t z) {  // splitmix64's output function
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The draw number `counter` of the stream `key`.
PF_HOST_DEVICE uint64_t draw64(uint64_t key, uint64_t counter) { return mix64(key + (counter + 1u) * kGolden); }

// A 64-bit draw mapped onto [0, n): floor(x * n / 2^64).
PF_HOST_DEVICE uint64_t draw_below(uint64_t x, uint64_t n) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(x, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
#endif
}

}  // namespace pyg_fast
