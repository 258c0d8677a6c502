// What the kernels that reduce edges in any order share (edge_softmax_coo, scatter_extremum):
// where a value's destination sits, and atomic maxima and minima of floating values. Torch-free.
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

// Value i of an [E, H] tensor: its destination's slot in a [V, H] buffer, -1 where the destination
// is out of range.
__device__ __forceinline__ int64_t coo_slot(const int64_t* __restrict__ index, int64_t i, int64_t heads,
                                            int64_t num_nodes) {
  const int64_t e = i / heads, d = index[e];
  return static_cast<uint64_t>(d) < static_cast<uint64_t>(num_nodes) ? d * heads + (i - e * heads) : -1;
}

// On the value's bits: as a signed integer they order the floats without a sign bit, as an unsigned
// one they order those with it in reverse (so a buffer may start at -inf for a maximum, +inf for a
// minimum). The sign bit, not v >= 0, picks the order: -0.0's bits are INT_MIN as a signed integer.
// A value that does not beat what a plain load reads is dropped without an atomic: the buffer only
// moves one way, so a stale read errs towards the atomic; NaN compares false and takes it.
__device__ __forceinline__ void atomic_max_value(float* p, float v) {
  if (*p >= v) return;
  if (!signbit(v)) atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned*>(p), __float_as_uint(v));
}

__device__ __forceinline__ void atomic_max_value(double* p, double v) {
  if (*p >= v) return;
  if (!signbit(v)) atomicMax(reinterpret_cast<long long*>(p), __double_as_longlong(v));
  else atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(__double_as_longlong(v)));
}

__device__ __forceinline__ void atomic_min_value(float* p, float v) {
  if (*p <= v) return;
  if (!signbit(v)) atomicMin(reinterpret_cast<int*>(p), __float_as_int(v));
  else atomicMax(reinterpret_cast<unsigned*>(p), __float_as_uint(v));
}

__device__ __forceinline__ void atomic_min_value(double* p, double v) {
  if (*p <= v) return;
  if (!signbit(v)) atomicMin(reinterpret_cast<long long*>(p), __double_as_longlong(v));
  else atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(__double_as_longlong(v)));
}

}  // namespace pyg_fast::cuda
