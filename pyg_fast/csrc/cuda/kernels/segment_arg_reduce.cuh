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

// Max/min with their rows in two parts. Segments of at most kArgWalkMaxRows rows are walked, a
// thread per segment and kVec features, which writes the value and row at once (no keys, no
// atomics: arxiv_like, mean 7 rows, F = 64 took 449 us with keys for every segment against
// torch_scatter's walk at 315). Longer ones, whose walk would wait on its longest segment
// (reddit2_like: 40,138 rows; segment_csr max took 4.55 ms at F = 16 with a walk, torch_scatter
// 2.55), split their positions evenly across threads, each folding its run into keys whose
// unsigned order is the reduction's and merging one key per segment with a 64-bit atomicMax.
// Values of 32 bits or fewer pack their row into the key's low half (the smaller row wins ties):
// one pass into `arg` itself, then an unpack. Wider values take a second pass that finds the
// smallest row holding the key (atomicMin) and writes its value. Both parts break ties for the
// smallest row.
constexpr int kArgRowsThreads = 256;
constexpr int64_t kArgWalkMaxRows = 128;
// The longest run a thread folds (fewer atomics per row on long segments); a run is shortened
// until the passes fill the device (arg_rows_per_thread in ../segment_arg_reduce.cu).
constexpr int kArgRowsPerThread = 64;
// Loads in flight per thread, and blocks per SM the registers must allow: with 4 loads a pass over
// reddit2_like at F = 64 moved 1.5 TB/s (H200), with 16 and 120 registers (2 blocks an SM) 1.3.
constexpr int kArgRowsUnroll = 8;
constexpr int kArgRowsBlocksPerSM = 4;

enum class ArgRowsPass : int { Packed = 0, Keys = 1, FindRow = 2 };
enum class ArgWalkPass : int { Walk = 0, Unpack = 1 };

template <typename scalar_t>
constexpr bool kArgPacks = sizeof(scalar_t) <= 4;

// The order of a value: the larger wins, NaN (every NaN) above every number for max and min
// alike, -0 and +0 tie. In the low 32 bits where the value is packed, else all 64.
template <ArgReduce R, typename scalar_t>
__device__ __forceinline__ unsigned long long arg_order(scalar_t value) {
  unsigned long long order;
  if constexpr (std::is_integral_v<scalar_t>) {
    order = kArgPacks<scalar_t>
                ? static_cast<unsigned long long>(static_cast<uint32_t>(static_cast<int32_t>(value)) ^ 0x80000000u)
                : static_cast<unsigned long long>(static_cast<long long>(value)) ^ (1ull << 63);
  } else if constexpr (kArgPacks<scalar_t>) {
    const float v = static_cast<float>(value);
    if (v != v) return 0xFFFFFFFFull;
    const uint32_t bits = __float_as_uint(v == 0.f ? 0.f : v);
    order = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // never all ones: only NaN is
  } else {
    const double v = static_cast<double>(value);
    if (v != v) return ~0ull;
    const auto bits = static_cast<unsigned long long>(__double_as_longlong(v == 0.0 ? 0.0 : v));
    order = (bits >> 63) ? ~bits : (bits | (1ull << 63));
  }
  if constexpr (R == ArgReduce::Min) order = kArgPacks<scalar_t> ? (~order & 0xFFFFFFFFull) : ~order;
  return order;
}

// kVec consecutive features of a row in one load (a 16-byte load for four floats: the scalar
// pass moved 1.5 TB/s at F = 64 on reddit2_like, H200).
template <typename scalar_t, int kVec>
struct alignas(sizeof(scalar_t) * kVec) ArgRowsVec {
  scalar_t v[kVec];
};

// Segment s's positions [lo, hi), clamped to [0, E): an unchecked pointer moves no read or write
// out of bounds.
__device__ __forceinline__ void arg_segment(const int64_t* ptr, int64_t s, int64_t E, int64_t& lo, int64_t& hi) {
  lo = ptr[s] < 0 ? 0 : (ptr[s] > E ? E : ptr[s]);
  hi = ptr[s + 1] > E ? E : ptr[s + 1];
  hi = hi < lo ? lo : hi;
}

// Blocks of (lanes features) x (kArgRowsThreads / lanes segments), segments grid-strided, feature
// blocks over gridDim.y, b over gridDim.z. Walk: a segment of at most kArgWalkMaxRows rows writes
// its extremum and smallest row holding it into out and arg (0 and E where empty); a longer one
// starts its keys for the rows passes (zero keys; where they do not pack, also arg E and out 0).
// Unpack (packed values, after the Packed pass): a longer segment's key in arg becomes its row,
// out the value there. keys and arg are one buffer where values pack (so neither is __restrict__).
// kPerm: position k holds row perm[k] (else k).
template <ArgReduce R, ArgWalkPass P, bool kPerm, int kVec, typename scalar_t>
__global__ void __launch_bounds__(kArgRowsThreads)
    segment_arg_walk_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                            const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                            bool packed, unsigned long long* keys, int64_t* arg, scalar_t* __restrict__ out) {
  using Vec = ArgRowsVec<scalar_t, kVec>;
  constexpr int kUnroll = 4;
  const int64_t f = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;
  if (f >= F) return;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; s < V;
       s += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    int64_t lo, hi;
    arg_segment(ptr, s, E, lo, hi);
    const bool walked = hi - lo <= kArgWalkMaxRows;
    if (P == ArgWalkPass::Unpack && walked) continue;
    for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
      const int64_t at = (b * V + s) * F + f;
      if constexpr (P == ArgWalkPass::Unpack) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const unsigned long long key = keys[at + j];
          const int64_t row = key ? static_cast<int64_t>(0xFFFFFFFFull - (key & 0xFFFFFFFFull)) : E;
          arg[at + j] = row;
          out[at + j] = key ? src[(b * E + row) * F + f + j] : scalar_t(0);
        }
        continue;
      }
      if (!walked) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          keys[at + j] = 0ull;
          if (!packed) {
            arg[at + j] = E;
            out[at + j] = scalar_t(0);
          }
        }
        continue;
      }
      const scalar_t* column = src + b * E * F + f;
      unsigned long long best[kVec];
      int64_t where[kVec];
      scalar_t value[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        best[j] = 0ull;
        where[j] = E;
        value[j] = scalar_t(0);
      }
      for (int64_t k = lo; k < hi; k += kUnroll) {
        int64_t rows[kUnroll];
        Vec values[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) rows[u] = k + u < hi ? (kPerm ? perm[k + u] : k + u) : E;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k + u < hi) values[u] = *reinterpret_cast<const Vec*>(column + rows[u] * F);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k + u >= hi) break;
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const unsigned long long order = arg_order<R>(values[u].v[j]);
            if (where[j] == E || order > best[j] || (order == best[j] && rows[u] < where[j])) {
              best[j] = order;
              where[j] = rows[u];
              value[j] = values[u].v[j];
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        arg[at + j] = where[j];
        out[at + j] = value[j];
      }
    }
  }
}

// The segments longer than kArgWalkMaxRows: blocks of (lanes features) x (kArgRowsThreads / lanes
// runs of rows_per_thread positions), feature blocks over gridDim.y, b over gridDim.z; a thread
// folds each long segment its run meets. Packed and Keys: keys [B, V, F] (zeroed by the walk)
// receive each segment's largest key (Packed: order << 32 | 0xFFFFFFFF - row, so 0 stays
// "empty"). FindRow: arg [B, V, F] (E there) receives the smallest row holding the key, out its
// value. Positions outside [ptr[0], ptr[V]] are skipped.
template <ArgReduce R, ArgRowsPass P, bool kPerm, int kVec, typename scalar_t>
__global__ void __launch_bounds__(kArgRowsThreads, kArgRowsBlocksPerSM)
    segment_arg_rows_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                            const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                            int64_t rows_per_thread, unsigned long long* keys, unsigned long long* arg,
                            scalar_t* __restrict__ out) {
  using Vec = ArgRowsVec<scalar_t, kVec>;
  constexpr int kUnroll = kVec == 1 ? kArgRowsUnroll : kArgRowsUnroll / 2;
  const int64_t f = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;
  const int64_t first = ptr[0] < 0 ? 0 : ptr[0], last = ptr[V] > E ? E : ptr[V];
  int64_t begin = (static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y) * rows_per_thread;
  int64_t end = begin + rows_per_thread;
  begin = begin < first ? first : begin;
  end = end > last ? last : end;
  if (f >= F || begin >= end) return;
  int64_t lo = 0, hi = V - 1;  // the segment of `begin`: the last s < V with ptr[s] <= begin
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (ptr[mid] <= begin) lo = mid; else hi = mid - 1;
  }
  const unsigned long long none = static_cast<unsigned long long>(E);
  for (int64_t s = lo; s < V; ++s) {
    int64_t seg_lo, seg_hi;
    arg_segment(ptr, s, E, seg_lo, seg_hi);
    if (seg_lo >= end) break;
    if (seg_hi - seg_lo <= kArgWalkMaxRows) continue;
    const int64_t k_lo = seg_lo > begin ? seg_lo : begin, k_hi = seg_hi < end ? seg_hi : end;
    if (k_lo >= k_hi) continue;
    for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
      const scalar_t* column = src + b * E * F + f;
      const int64_t at = (b * V + s) * F + f;
      unsigned long long best[kVec], found[kVec];
      scalar_t found_value[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        best[j] = P == ArgRowsPass::FindRow ? keys[at + j] : 0ull;
        found[j] = none;
        found_value[j] = scalar_t(0);
      }
      for (int64_t k = k_lo; k < k_hi; k += kUnroll) {
        int64_t rows[kUnroll];
        Vec values[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) rows[u] = k + u < k_hi ? (kPerm ? perm[k + u] : k + u) : 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k + u < k_hi) values[u] = *reinterpret_cast<const Vec*>(column + rows[u] * F);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k + u >= k_hi) break;
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const unsigned long long order = arg_order<R>(values[u].v[j]);
            if constexpr (P == ArgRowsPass::FindRow) {
              const auto row = static_cast<unsigned long long>(rows[u]);
              if (order == best[j] && row < found[j]) {
                found[j] = row;
                found_value[j] = values[u].v[j];
              }
            } else {
              const unsigned long long key =
                  P == ArgRowsPass::Packed
                      ? (order << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(rows[u]))
                      : order;
              best[j] = key > best[j] ? key : best[j];
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if constexpr (P == ArgRowsPass::FindRow) {
          if (found[j] != none) {
            atomicMin(arg + at + j, found[j]);
            out[at + j] = found_value[j];  // every row holding the key holds this value
          }
        } else {
          atomicMax(keys + at + j, best[j]);
        }
      }
    }
  }
}

}  // namespace pyg_fast::cuda
