// One output element of segment_arg_reduce, shared by its CPU and CUDA kernels. Torch-free.
#pragma once

#include <cstdint>

#include "reduce.h"

namespace pyg_fast {

enum class ArgReduce : int { Max = 0, Min = 1, Mul = 2 };

// Rows read ahead of the fold: a walk that loads one row per step waits a memory latency per row
// (H100, 23 M edges, F = 16: 8.7 ms for the max with its argument, torch_scatter 4.6 ms).
constexpr int kArgReduceUnroll = 4;

// Reduces column `column[row * F]` over the rows at positions [begin, end) of a segment (clamped
// to [0, E): a pointer that strays outside the rows reads nothing there), in the order of `perm`
// (the row at position k is perm[k]; identity when null). Max/min write the first extremum met
// (NaN propagates, as in torch.scatter_reduce) and its row (E for an empty segment, whose value is
// 0); mul writes the product (1 for an empty segment) and no row.
template <ArgReduce R, typename scalar_t, typename acc_t>
PF_HOST_DEVICE void segment_arg_reduce_one(const scalar_t* column, int64_t F, const int64_t* perm, int64_t begin,
                                           int64_t end, int64_t E, scalar_t* out, int64_t* arg) {
  begin = begin < 0 ? 0 : begin;
  end = end > E ? E : end;
  acc_t best = R == ArgReduce::Mul ? acc_t(1) : acc_t(0);
  int64_t where = E;
  auto fold = [&](acc_t v, int64_t row) {
    if constexpr (R == ArgReduce::Mul) {
      best = best * v;
    } else {
      const bool nan_over_number = v != v && best == best;
      if (where == E || (R == ArgReduce::Max ? v > best : v < best) || nan_over_number) {
        best = v;
        where = row;
      }
    }
  };
  int64_t k = begin;
  for (; k + kArgReduceUnroll <= end; k += kArgReduceUnroll) {
    int64_t rows[kArgReduceUnroll];
    acc_t values[kArgReduceUnroll];
    for (int u = 0; u < kArgReduceUnroll; ++u) rows[u] = perm ? perm[k + u] : k + u;
    for (int u = 0; u < kArgReduceUnroll; ++u) values[u] = static_cast<acc_t>(column[rows[u] * F]);
    for (int u = 0; u < kArgReduceUnroll; ++u) fold(values[u], rows[u]);
  }
  for (; k < end; ++k) {
    const int64_t row = perm ? perm[k] : k;
    fold(static_cast<acc_t>(column[row * F]), row);
  }
  *out = static_cast<scalar_t>(best);
  if constexpr (R != ArgReduce::Mul) *arg = where;
}

// Whether `value` is the extremum `best` of its segment: equal, or both NaN (the first NaN is
// the extremum). scatter_arg's CPU and CUDA kernels match rows with it.
template <typename acc_t>
PF_HOST_DEVICE bool holds_extremum(acc_t value, acc_t best) {
  return value == best || (value != value && best != best);
}

// Runs __VA_ARGS__ (a lambda) with the constexpr `R` bound to the runtime ArgReduce value.
#define PF_DISPATCH_ARG_REDUCE(value, ...)                                        \
  [&] {                                                                          \
    switch (value) {                                                             \
      case ::pyg_fast::ArgReduce::Max: {                                         \
        constexpr ::pyg_fast::ArgReduce R = ::pyg_fast::ArgReduce::Max;          \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      case ::pyg_fast::ArgReduce::Min: {                                         \
        constexpr ::pyg_fast::ArgReduce R = ::pyg_fast::ArgReduce::Min;          \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      default: {                                                                 \
        constexpr ::pyg_fast::ArgReduce R = ::pyg_fast::ArgReduce::Mul;          \
        return __VA_ARGS__();                                                    \
      }                                                                          \
    }                                                                            \
  }()

}  // namespace pyg_fast
