// The CUDA kernel of segment_arg_reduce (binding: ../segment_arg_reduce.cu). Torch-free.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../common/segment_arg_reduce.h"

namespace pyg_fast::cuda {

constexpr int kArgReduceThreads = 256;

// A thread per output element, features fastest: the threads of a segment read its rows
// contiguously. Products only: max and min take the row runs below.
template <ArgReduce R, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kArgReduceThreads)
    segment_arg_reduce_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                              const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                              scalar_t* __restrict__ out, int64_t* __restrict__ arg) {
  const int64_t total = B * V * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t f = i % F, row = i / F, r = row % V, b = row / V;
    segment_arg_reduce_one<R, scalar_t, acc_t>(src + b * E * F + f, F, perm, ptr[r], ptr[r + 1], E, out + i,
                                               arg ? arg + i : nullptr);
  }
}

}  // namespace pyg_fast::cuda

namespace pyg_fast::cuda {

// Max/min with their rows, the positions of a grouping split evenly across threads instead of a
// thread per segment: the walk above waits on the longest segment (reddit2_like: 40,138 rows, mean
// 100; segment_csr max took 4.55 ms at F = 16 on an H100, torch_scatter's walk 2.55). Each thread
// folds a run of consecutive positions into order keys and merges one per segment it touched with
// a 64-bit atomicMax; a second pass, the same walk, takes the smallest row whose key is the
// segment's with an atomicMin; a third reads each extremum at its row.
constexpr int kArgRowsThreads = 256;
constexpr int kArgRowsPerThread = 32;

// A key whose unsigned order is the reduction's: the larger key wins, NaN (every NaN) above every
// number for max and min alike, -0 and +0 tie. Integers and floating values alike fit 64 bits.
template <ArgReduce R, typename scalar_t>
__device__ __forceinline__ unsigned long long arg_order(scalar_t value) {
  unsigned long long order;
  if constexpr (std::is_integral_v<scalar_t>) {
    order = static_cast<unsigned long long>(static_cast<long long>(value)) ^ (1ull << 63);
  } else {
    const double v = static_cast<double>(value);
    if (v != v) return ~0ull;
    const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(v == 0.0 ? 0.0 : v));
    order = (bits >> 63) ? ~bits : (bits | (1ull << 63));  // never all ones: only NaN is
  }
  return R == ArgReduce::Min ? ~order : order;
}

// Blocks of (lanes features) x (kArgRowsThreads / lanes runs of kArgRowsPerThread positions), b
// over gridDim.y. Without kFindRow: keys [B, V, F] (zero-filled) receive each segment's largest
// key. With it: arg [B, V, F] (filled with E) receives the smallest row holding that key. Positions
// outside [ptr[0], ptr[V]] are skipped; an unchecked pointer moves no read or write out of bounds
// (segments stay below V, positions in [0, E)).
template <ArgReduce R, bool kFindRow, typename scalar_t>
__global__ void __launch_bounds__(kArgRowsThreads)
    segment_arg_rows_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                            const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                            unsigned long long* __restrict__ keys, unsigned long long* __restrict__ arg) {
  const int64_t first = ptr[0] < 0 ? 0 : ptr[0], last = ptr[V] > E ? E : ptr[V];
  int64_t begin = (static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y) * kArgRowsPerThread;
  int64_t end = begin + kArgRowsPerThread;
  begin = begin < first ? first : begin;
  end = end > last ? last : end;
  if (begin >= end) return;
  int64_t lo = 0, hi = V - 1;  // the segment of `begin`: the last s < V with ptr[s] <= begin
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (ptr[mid] <= begin) lo = mid; else hi = mid - 1;
  }
  const unsigned long long none = static_cast<unsigned long long>(E);
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const scalar_t* rows_of_b = src + b * E * F;
    for (int64_t f = threadIdx.x; f < F; f += blockDim.x) {
      const int64_t at = b * V * F + f;
      int64_t s = lo, next = ptr[s + 1];
      unsigned long long best = kFindRow ? keys[at + s * F] : 0ull, found = none;
      bool touched = false;
      for (int64_t k = begin; k < end; k += kArgReduceUnroll) {
        int64_t rows[kArgReduceUnroll];  // loads first: they depend on no segment bookkeeping
        scalar_t values[kArgReduceUnroll];
        for (int u = 0; u < kArgReduceUnroll; ++u) rows[u] = k + u < end ? (perm ? perm[k + u] : k + u) : 0;
        for (int u = 0; u < kArgReduceUnroll; ++u) values[u] = k + u < end ? rows_of_b[rows[u] * F + f] : scalar_t(0);
        for (int u = 0; u < kArgReduceUnroll && k + u < end; ++u) {
          while (k + u >= next && s + 1 < V) {
            if constexpr (kFindRow) {
              if (found != none) atomicMin(arg + at + s * F, found);
              found = none;
              best = keys[at + (s + 1) * F];
            } else {
              if (touched) atomicMax(keys + at + s * F, best);
              best = 0ull;
              touched = false;
            }
            next = ptr[++s + 1];
          }
          const unsigned long long key = arg_order<R>(values[u]);
          if constexpr (kFindRow) {
            const unsigned long long row = static_cast<unsigned long long>(rows[u]);
            found = key == best && row < found ? row : found;
          } else {
            best = key > best ? key : best;
            touched = true;
          }
        }
      }
      if constexpr (kFindRow) {
        if (found != none) atomicMin(arg + at + s * F, found);
      } else if (touched) {
        atomicMax(keys + at + s * F, best);
      }
    }
  }
}

// The extremum read at its row: 0 for an empty segment (row E).
template <typename scalar_t>
__global__ void segment_arg_rows_values_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ arg,
                                               int64_t total, int64_t E, int64_t V, int64_t F,
                                               scalar_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = arg[i];
    out[i] = row < E ? src[((i / (V * F)) * E + row) * F + i % F] : scalar_t(0);
  }
}

}  // namespace pyg_fast::cuda
