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
// folds a run of consecutive positions into keys whose unsigned order is the reduction's and
// merges one key per segment it touched with a 64-bit atomicMax. Values of 32 bits or fewer pack
// their row into the key's low half (the smaller row wins ties): one pass, then a light one that
// unpacks. Wider values take a second pass that finds the smallest row holding the key (atomicMin)
// and writes its value.
constexpr int kArgRowsThreads = 256;
// The longest run a thread folds (fewer atomics per row on long segments); a run is shortened
// until the passes fill the device (arg_rows_per_thread in ../segment_arg_reduce.cu).
constexpr int kArgRowsPerThread = 64;
// Loads in flight per thread, and blocks per SM the registers must allow: with 4 loads a pass over
// reddit2_like at F = 64 moved 1.5 TB/s (H200), with 16 and 120 registers (2 blocks an SM) 1.3.
constexpr int kArgRowsUnroll = 8;
constexpr int kArgRowsBlocksPerSM = 4;

enum class ArgRowsPass : int { Packed = 0, Keys = 1, FindRow = 2 };

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

// Blocks of (lanes features) x (kArgRowsThreads / lanes runs of rows_per_thread positions),
// feature blocks over gridDim.y, b over gridDim.z. Packed and Keys: keys [B, V, F] (zero-filled)
// receive each segment's largest key (Packed: order << 32 | 0xFFFFFFFF - row, so 0 stays "empty").
// FindRow: arg [B, V, F] (filled with E) receives the smallest row holding the key, out its
// value. kPerm: the position k holds row perm[k] (else k; a template argument, as the rows of a
// pointer need no registers: occupancy bounds these passes). Positions outside [ptr[0], ptr[V]] are skipped; an unchecked pointer moves no read or
// write out of bounds (segments stay below V, positions in [0, E)).
// kVec consecutive features of a row in one load (a 16-byte load for four floats: the scalar
// pass moved 1.5 TB/s at F = 64 on reddit2_like, H200).
template <typename scalar_t, int kVec>
struct alignas(sizeof(scalar_t) * kVec) ArgRowsVec {
  scalar_t v[kVec];
};

template <ArgReduce R, ArgRowsPass P, bool kPerm, int kVec, typename scalar_t>
__global__ void __launch_bounds__(kArgRowsThreads, kArgRowsBlocksPerSM)
    segment_arg_rows_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ ptr,
                            const int64_t* __restrict__ perm, int64_t B, int64_t E, int64_t V, int64_t F,
                            int64_t rows_per_thread, unsigned long long* __restrict__ keys,
                            unsigned long long* __restrict__ arg, scalar_t* __restrict__ out) {
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
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const scalar_t* column = src + b * E * F + f;
    const int64_t at = b * V * F + f;
    int64_t s = lo, next = ptr[s + 1];
    unsigned long long best[kVec], found[kVec];
    scalar_t found_value[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      best[j] = P == ArgRowsPass::FindRow ? keys[at + s * F + j] : 0ull;
      found[j] = none;
      found_value[j] = scalar_t(0);
    }
    bool touched = false;
    for (int64_t k = begin; k < end; k += kUnroll) {
      int64_t rows[kUnroll];  // loads first: they depend on no segment bookkeeping
      Vec values[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) rows[u] = k + u < end ? (kPerm ? perm[k + u] : k + u) : 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (k + u < end) values[u] = *reinterpret_cast<const Vec*>(column + rows[u] * F);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (k + u >= end) break;
        while (k + u >= next && s + 1 < V) {
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            if constexpr (P == ArgRowsPass::FindRow) {
              if (found[j] != none) {
                atomicMin(arg + at + s * F + j, found[j]);
                out[at + s * F + j] = found_value[j];  // every row holding the key holds this value
              }
              found[j] = none;
              best[j] = keys[at + (s + 1) * F + j];
            } else {
              if (touched) atomicMax(keys + at + s * F + j, best[j]);
              best[j] = 0ull;
            }
          }
          touched = false;
          next = ptr[++s + 1];
        }
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
                P == ArgRowsPass::Packed ? (order << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(rows[u]))
                                         : order;
            best[j] = key > best[j] ? key : best[j];
          }
        }
        touched = true;
      }
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if constexpr (P == ArgRowsPass::FindRow) {
        if (found[j] != none) {
          atomicMin(arg + at + s * F + j, found[j]);
          out[at + s * F + j] = found_value[j];
        }
      } else if (touched) {
        atomicMax(keys + at + s * F + j, best[j]);
      }
    }
  }
}

// Packed keys [B * V * F] into the extremum read at its row and the row: 0 and E for an empty
// segment (key 0). b over gridDim.y; 32-bit index arithmetic where V * F fits (64-bit division
// took 0.33 ms of 4.3 on reddit2_like at F = 64, H200).
template <typename scalar_t>
__global__ void segment_arg_rows_unpack_kernel(const scalar_t* __restrict__ src,
                                               const unsigned long long* __restrict__ keys, int64_t B,
                                               int64_t E, int64_t VF, int64_t F, scalar_t* __restrict__ out,
                                               int64_t* __restrict__ arg) {
  const bool narrow = VF < (int64_t{1} << 31);
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < VF;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t at = b * VF + i;
      const unsigned long long key = keys[at];
      const int64_t row = key ? static_cast<int64_t>(0xFFFFFFFFull - (key & 0xFFFFFFFFull)) : E;
      const int64_t f = narrow ? static_cast<int64_t>(static_cast<uint32_t>(i) % static_cast<uint32_t>(F)) : i % F;
      arg[at] = row;
      out[at] = key ? src[(b * E + row) * F + f] : scalar_t(0);
    }
  }
}

}  // namespace pyg_fast::cuda
