// Reduction policies shared by every CPU and CUDA kernel. Torch-free so that
// CUDA kernel headers that include it compile without torch's headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PF_HOST_DEVICE inline
#endif

namespace pyg_fast {

// The integer values are part of the op schemas' contract with Python
// (pyg_fast/ops/_reduce.py), keep them in sync.
enum class Reduce : int64_t { Sum = 0, Mean = 1, Max = 2, Min = 3 };

// init(): identity; update(acc, v): fold one value in; finalize(acc, count):
// value written for a segment of `count` rows (PyG writes 0 for empty ones).
template <Reduce R, typename acc_t>
struct Reducer;

template <typename acc_t>
struct Reducer<Reduce::Sum, acc_t> {
  static PF_HOST_DEVICE acc_t init() { return acc_t(0); }
  static PF_HOST_DEVICE acc_t update(acc_t acc, acc_t v) { return acc + v; }
  static PF_HOST_DEVICE acc_t finalize(acc_t acc, int64_t) { return acc; }
};

template <typename acc_t>
struct Reducer<Reduce::Mean, acc_t> {
  static PF_HOST_DEVICE acc_t init() { return acc_t(0); }
  static PF_HOST_DEVICE acc_t update(acc_t acc, acc_t v) { return acc + v; }
  // One reciprocal times the sum, not a division per value: a division's full-range slow path at
  // every call site costs the CUDA kernels registers (and occupancy). At most an ulp from acc / count.
  static PF_HOST_DEVICE acc_t finalize(acc_t acc, int64_t count) {
    return count > 0 ? acc * (acc_t(1) / acc_t(count)) : acc_t(0);
  }
};

// Max and min propagate NaN like torch.scatter_reduce does.
template <typename acc_t>
struct Reducer<Reduce::Max, acc_t> {
  static PF_HOST_DEVICE acc_t init() { return -std::numeric_limits<acc_t>::infinity(); }
  static PF_HOST_DEVICE acc_t update(acc_t acc, acc_t v) {
    const acc_t larger = v > acc ? v : acc;  // a maxss on x86: no branch
    return v != v ? v : larger;
  }
  static PF_HOST_DEVICE acc_t finalize(acc_t acc, int64_t count) {
    return count > 0 ? acc : acc_t(0);
  }
};

template <typename acc_t>
struct Reducer<Reduce::Min, acc_t> {
  static PF_HOST_DEVICE acc_t init() { return std::numeric_limits<acc_t>::infinity(); }
  static PF_HOST_DEVICE acc_t update(acc_t acc, acc_t v) {
    const acc_t smaller = v < acc ? v : acc;  // a minss on x86: no branch
    return v != v ? v : smaller;
  }
  static PF_HOST_DEVICE acc_t finalize(acc_t acc, int64_t count) {
    return count > 0 ? acc : acc_t(0);
  }
};

// Runs __VA_ARGS__ (a lambda) with the constexpr `R` bound to the runtime value.
#define PF_DISPATCH_REDUCE(reduce_value, ...)                                  \
  [&] {                                                                       \
    switch (reduce_value) {                                                   \
      case ::pyg_fast::Reduce::Sum: {                                         \
        constexpr ::pyg_fast::Reduce R = ::pyg_fast::Reduce::Sum;             \
        return __VA_ARGS__();                                                 \
      }                                                                       \
      case ::pyg_fast::Reduce::Mean: {                                        \
        constexpr ::pyg_fast::Reduce R = ::pyg_fast::Reduce::Mean;            \
        return __VA_ARGS__();                                                 \
      }                                                                       \
      case ::pyg_fast::Reduce::Max: {                                         \
        constexpr ::pyg_fast::Reduce R = ::pyg_fast::Reduce::Max;             \
        return __VA_ARGS__();                                                 \
      }                                                                       \
      default: {                                                              \
        constexpr ::pyg_fast::Reduce R = ::pyg_fast::Reduce::Min;             \
        return __VA_ARGS__();                                                 \
      }                                                                       \
    }                                                                         \
  }()

}  // namespace pyg_fast
