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
template <bool IS_MAX>
__device__ __forceinline__ void atomic_extremum(float* p, float v) {
  const bool positive = !signbit(v);
  if (IS_MAX == positive) {  // max of a positive, min of a negative: larger bits win as int / as unsigned
    if (positive) atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
    else atomicMax(reinterpret_cast<unsigned*>(p), __float_as_uint(v));
  } else {
    if (positive) atomicMin(reinterpret_cast<int*>(p), __float_as_int(v));
    else atomicMin(reinterpret_cast<unsigned*>(p), __float_as_uint(v));
  }
}

template <bool IS_MAX>
__device__ __forceinline__ void atomic_extremum(double* p, double v) {
  const bool positive = !signbit(v);
  const long long bits = __double_as_longlong(v);
  auto* as_signed = reinterpret_cast<long long*>(p);
  auto* as_unsigned = reinterpret_cast<unsigned long long*>(p);
  if (IS_MAX == positive) {
    if (positive) atomicMax(as_signed, bits);
    else atomicMax(as_unsigned, static_cast<unsigned long long>(bits));
  } else {
    if (positive) atomicMin(as_signed, bits);
    else atomicMin(as_unsigned, static_cast<unsigned long long>(bits));
  }
}

// Whether v may move a buffer that a plain load read as `seen`: a value that does not beat it is
// dropped without an atomic (the buffer only moves one way, so a stale read errs towards the
// atomic; NaN compares false and takes it).
template <bool IS_MAX, typename T>
__device__ __forceinline__ bool may_move(T seen, T v) {
  return IS_MAX ? !(seen >= v) : !(seen <= v);
}

template <typename T>
__device__ __forceinline__ void atomic_max_value(T* p, T v) {
  if (may_move<true>(*p, v)) atomic_extremum<true>(p, v);
}

}  // namespace pyg_fast::cuda
