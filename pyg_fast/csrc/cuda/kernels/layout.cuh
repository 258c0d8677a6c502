// Per-graph preparation (pyg_fast/ops/_layout.py): grouping a COO index into CSR form, the
// segment of every row of a CSR pointer, and a grouping with self loops inserted. Torch-free.
// The per-element rules are host + device code: the CPU kernels (../../cpu/layout.cpp) include
// this header too, so both devices place every row and report every bad value the same way. The
// CUDA kernels below are compiled by nvcc only and launched by ../layout.cu.
//
// Invalid input never leads to an access out of bounds: a COO value outside [0, V) is grouped
// as segment V, after every valid row (so ptr[V] counts the valid rows only and the kernels that
// read ptr never reach the invalid ones), and a flag is raised for the Python layer to report.
#pragma once

#include <cstdint>

#include "../../common/reduce.h"  // PF_HOST_DEVICE
#include "segment_of.cuh"

namespace pyg_fast::cuda {

// Positions of coo_to_csr's flags (int64 [kLayoutFlags], nonzero when raised). Every writer stores
// the same 1, plain stores: the flags may lie in host memory (flag_ring.cuh).
constexpr int kFlagIndexRange = 0;    // an index value outside [0, V)
constexpr int kFlagSrcRange = 1;      // a src value outside [0, src_bound)
constexpr int kFlagNotSorted = 2;     // declared sorted, but a value is below its predecessor
constexpr int kLayoutFlags = 3;
constexpr int kLayoutThreadsPerBlock = 256;

PF_HOST_DEVICE bool layout_valid(int64_t value, int64_t V) { return value >= 0 && value < V; }
// The segment a COO value groups into: itself when valid, else V (after every valid segment).
PF_HOST_DEVICE int64_t layout_key(int64_t value, int64_t V) { return layout_valid(value, V) ? value : V; }

// Number of bits of the largest key, V (at least 1): the radix sort sorts only these.
inline int layout_key_bits(int64_t V) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

// First position in keys[0:n] whose key is >= target, keys read through key(i) (non-decreasing
// where the input is valid; on any input the result lies in [0, n] and does not decrease with
// target, so a pointer built from it stays in bounds).
template <typename KeyAt>
PF_HOST_DEVICE int64_t layout_lower_bound(KeyAt key, int64_t n, int64_t target) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (key(mid) < target) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Self loops inserted into a grouping (looped_csr): in a stable grouping of the edges followed by
// the loops v -> v (v < num_loops, input position E + v), destination v keeps its edges in order,
// then its loop. Row e of destination d moves to e + min(d, num_loops) (the loops of the
// destinations before it); invalid rows (d = V) move past every loop.
PF_HOST_DEVICE int64_t looped_row(int64_t e, int64_t d, int64_t num_loops) {
  return e + (d < num_loops ? d : num_loops);
}
// Where loop v lands: after destination v's edges and the v loops before it.
PF_HOST_DEVICE int64_t looped_loop(const int64_t* __restrict__ ptr, int64_t v) { return ptr[v + 1] + v; }
PF_HOST_DEVICE int64_t looped_ptr(const int64_t* __restrict__ ptr, int64_t v, int64_t num_loops) {
  return ptr[v] + (v < num_loops ? v : num_loops);
}

#if defined(__CUDACC__)
// Keys for the radix sort (each value's segment, as 32 bits) and the row numbers it permutes, as
// 32 bits too (the sort takes an int count of rows): 16 bytes a row a pass instead of 24; raises
// kFlagIndexRange.
__global__ void coo_keys_kernel(const int64_t* __restrict__ index, int64_t E, int64_t V, uint32_t* __restrict__ keys,
                                uint32_t* __restrict__ rows, int64_t* __restrict__ flags) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= E) return;
  const int64_t value = index[e];
  if (!layout_valid(value, V)) flags[kFlagIndexRange] = 1;
  keys[e] = static_cast<uint32_t>(layout_key(value, V));
  rows[e] = static_cast<uint32_t>(e);
}

// The rest of coo_to_csr, one thread per pointer entry and per row: ptr[r] = the first sorted
// position of a key >= r (r <= V); perm[i] = rows[i], the sorted row numbers widened to int64;
// src_sorted[i] = src[perm[i]] (src[i] without rows) with kFlagSrcRange where it is outside
// [0, src_bound) (src_bound < 0: not checked); without rows (a declared-sorted index, read
// directly) kFlagIndexRange and kFlagNotSorted are raised here.
template <typename KeyAt>
__global__ void coo_finish_kernel(KeyAt key, const int64_t* __restrict__ index, int64_t E, int64_t V,
                                  const uint32_t* __restrict__ rows, const int64_t* __restrict__ src, int64_t src_bound,
                                  int64_t* __restrict__ ptr, int64_t* __restrict__ perm,
                                  int64_t* __restrict__ src_sorted, int64_t* __restrict__ flags) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i <= V) ptr[i] = layout_lower_bound(key, E, i);
  if (i >= E) return;
  int64_t row = i;
  if (rows == nullptr) {
    const int64_t value = index[i];
    if (!layout_valid(value, V)) flags[kFlagIndexRange] = 1;
    if (i > 0 && value < index[i - 1]) flags[kFlagNotSorted] = 1;
  } else {
    row = rows[i];
    perm[i] = row;
  }
  if (src != nullptr) {
    const int64_t s = src[row];
    if (src_bound >= 0 && (s < 0 || s >= src_bound)) flags[kFlagSrcRange] = 1;
    src_sorted[i] = s;
  }
}

// Sorted 32-bit keys, as coo_finish_kernel reads them.
struct SortedKeys {
  const uint32_t* keys;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return keys[i]; }
};
// A declared-sorted int64 index read in place, invalid values as V.
struct IndexKeys {
  const int64_t* index;
  int64_t V;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return layout_key(index[i], V); }
};

// csr_to_coo: the segment of every row.
__global__ void csr_to_coo_kernel(const int64_t* __restrict__ ptr, int64_t V, int64_t E, int64_t* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < E) out[e] = layout_segment_of(ptr, V, e);
}

// looped_csr, one thread per row, per loop and per pointer entry.
__global__ void looped_csr_kernel(const int64_t* __restrict__ src, const int64_t* __restrict__ ptr,
                                  const int64_t* __restrict__ perm, int64_t E, int64_t V, int64_t num_loops,
                                  int64_t* __restrict__ out_src, int64_t* __restrict__ out_ptr,
                                  int64_t* __restrict__ out_perm) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i <= V) out_ptr[i] = looped_ptr(ptr, i, num_loops);
  if (i < num_loops) {
    const int64_t at = looped_loop(ptr, i);
    out_src[at] = i;
    out_perm[at] = E + i;
  }
  if (i < E) {
    const int64_t d = i >= ptr[V] ? V : layout_segment_of(ptr, V, i);
    const int64_t at = looped_row(i, d, num_loops);
    out_src[at] = src[i];
    out_perm[at] = perm[i];
  }
}

// The groups schedule's table (segment_groups.cuh) for the segments of ptr, padded to max_groups
// groups (cuda/layout.cu). First counts[r] = the groups of segment r (ceil(len / group_size), at
// least one: an empty segment is written by its own group), which an inclusive scan turns into
// group_ptr[1:] (group_ptr[0] = 0 here); then group_start and group_segment per group slot.
__global__ void group_counts_kernel(const int64_t* __restrict__ ptr, int64_t V, int64_t group_size,
                                    int64_t* __restrict__ counts, int64_t* __restrict__ group_ptr) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r == 0) group_ptr[0] = 0;
  if (r >= V) return;
  const int64_t len = ptr[r + 1] - ptr[r];
  counts[r] = len > group_size ? (len + group_size - 1) / group_size : 1;
}

// Slot g < max_groups: the group's first row and its segment (the last r with group_ptr[r] <= g);
// slots past the last group, and group_start[max_groups], start at ptr[V] and belong to segment -1,
// which the kernel skips.
__global__ void group_fill_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ group_ptr, int64_t V,
                                  int64_t group_size, int64_t max_groups, int64_t* __restrict__ group_start,
                                  int64_t* __restrict__ group_segment) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g > max_groups) return;
  if (g == max_groups || g >= group_ptr[V]) {
    group_start[g] = ptr[V];
    if (g < max_groups) group_segment[g] = -1;
    return;
  }
  int64_t lo = 0, hi = V;  // first r with group_ptr[r] > g, in (0, V]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (group_ptr[mid] <= g) lo = mid + 1; else hi = mid;
  }
  const int64_t r = lo - 1;
  group_start[g] = ptr[r] + (g - group_ptr[r]) * group_size;
  group_segment[g] = r;
}
#endif

}  // namespace pyg_fast::cuda
