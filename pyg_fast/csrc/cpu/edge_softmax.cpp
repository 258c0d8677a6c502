#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../ops/edge_softmax.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// Calls row_fn(lo, hi, acc) for every destination row with a valid edge range; acc is scratch
// space of H accumulators per thread. Reports a malformed ptr as an error.
template <typename acc_t, typename RowFn>
void for_each_row(const at::Tensor& ptr, int64_t num_edges, int64_t heads, const RowFn& row_fn) {
  const int64_t num_rows = ptr.numel() - 1;
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  const int64_t avg_degree = num_rows > 0 ? num_edges / num_rows + 1 : 1;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / (avg_degree * heads));
  std::atomic<bool> bad_ptr{false};
  at::parallel_for(0, num_rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> first(heads), second(heads);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t lo = p[r], hi = p[r + 1];
      if (lo < 0 || hi < lo || hi > num_edges) {
        bad_ptr = true;
        continue;
      }
      row_fn(lo, hi, first.data(), second.data());
    }
  });
  PF_CHECK_VALUE(!bad_ptr, "pyg_fast: 'ptr' must be non-decreasing, start at >= 0 and end at <= ",
                    num_edges, " (the number of edges)");
}

at::Tensor edge_softmax(const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
  check_edge_softmax_args(src, ptr, lanes);  // lanes only concern the CUDA kernel
  auto out = at::empty_like(src);
  const int64_t E = src.size(0), H = src.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "edge_softmax", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    for_each_row<acc_t>(ptr, E, H, [&](int64_t lo, int64_t hi, acc_t* max, acc_t* sum) {
      std::fill(max, max + H, -std::numeric_limits<acc_t>::infinity());
      std::fill(sum, sum + H, acc_t(0));
      for (int64_t e = lo; e < hi; ++e)
        for (int64_t h = 0; h < H; ++h) max[h] = std::max(max[h], static_cast<acc_t>(s[e * H + h]));
      // Where the output holds the accumulation type (float32, float64), each exp is computed once
      // and kept there until it is scaled: the exps are most of the time (10 k edges x 16 heads,
      // one thread: 822 -> 487 us); float16/bfloat16 outputs would round them, so they recompute.
      constexpr bool keep = std::is_same_v<acc_t, scalar_t>;
      for (int64_t e = lo; e < hi; ++e)
        for (int64_t h = 0; h < H; ++h) {
          const acc_t x = std::exp(static_cast<acc_t>(s[e * H + h]) - max[h]);
          if constexpr (keep) o[e * H + h] = x;
          sum[h] += x;
        }
      for (int64_t h = 0; h < H; ++h) sum[h] = acc_t(1) / (sum[h] + acc_t(1e-16));
      for (int64_t e = lo; e < hi; ++e)
        for (int64_t h = 0; h < H; ++h) {
          const acc_t x = keep ? static_cast<acc_t>(o[e * H + h]) : std::exp(static_cast<acc_t>(s[e * H + h]) - max[h]);
          o[e * H + h] = static_cast<scalar_t>(x * sum[h]);
        }
    });
  });
  return out;
}

at::Tensor edge_softmax_backward(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& ptr,
                                 int64_t lanes) {
  check_edge_softmax_backward_args(out, grad_out, ptr, lanes);
  auto grad_src = at::empty_like(out);
  const int64_t E = out.size(0), H = out.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "edge_softmax_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* y = out.const_data_ptr<scalar_t>();
    const scalar_t* g = grad_out.const_data_ptr<scalar_t>();
    scalar_t* gs = grad_src.mutable_data_ptr<scalar_t>();
    for_each_row<acc_t>(ptr, E, H, [&](int64_t lo, int64_t hi, acc_t* dot, acc_t*) {
      std::fill(dot, dot + H, acc_t(0));
      for (int64_t e = lo; e < hi; ++e)
        for (int64_t h = 0; h < H; ++h)
          dot[h] += static_cast<acc_t>(y[e * H + h]) * static_cast<acc_t>(g[e * H + h]);
      for (int64_t e = lo; e < hi; ++e)
        for (int64_t h = 0; h < H; ++h)
          gs[e * H + h] = static_cast<scalar_t>(static_cast<acc_t>(y[e * H + h]) *
                                                (static_cast<acc_t>(g[e * H + h]) - dot[h]));
    });
  });
  return grad_src;
}

// The COO softmax, one pass each for the maxima, the sums and the outputs, sequential over the edges
// (their destinations come in any order). An index out of range raises the flag; its edge gets 0.
std::tuple<at::Tensor, at::Tensor> edge_softmax_coo(const at::Tensor& src, const at::Tensor& index, int64_t num_nodes,
                                                    int64_t /*flag_slot*/) {
  check_edge_softmax_coo_args(src, index, num_nodes);
  auto out = at::empty_like(src);
  auto flags = at::zeros({1}, index.options());
  const int64_t E = src.size(0), H = src.size(1), V = num_nodes;
  const int64_t* d = index.const_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "edge_softmax_coo", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> max(V * H, -std::numeric_limits<acc_t>::infinity()), sum(V * H, acc_t(0));
    bool bad = false;
    for (int64_t e = 0; e < E; ++e) {
      if (d[e] < 0 || d[e] >= V) {
        bad = true;
        continue;
      }
      for (int64_t h = 0; h < H; ++h) max[d[e] * H + h] = std::max(max[d[e] * H + h], static_cast<acc_t>(s[e * H + h]));
    }
    // The exponentials once, in parallel over the edges (the max is read-only by then), kept in
    // acc_t: in the output itself for float and double. Computed twice, serially, they took most of
    // the call (1.17 M edges x 4 heads, 2 threads: 49.7 -> 25.4-27.1 ms).
    constexpr bool kDirect = std::is_same_v<scalar_t, acc_t>;
    std::vector<acc_t> kept(kDirect ? 0 : E * H);
    acc_t* ex = kDirect ? reinterpret_cast<acc_t*>(o) : kept.data();
    at::parallel_for(0, E, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(H, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) {
        const bool ok = d[e] >= 0 && d[e] < V;
        for (int64_t h = 0; h < H; ++h)
          ex[e * H + h] = ok ? std::exp(static_cast<acc_t>(s[e * H + h]) - max[d[e] * H + h]) : acc_t(0);
      }
    });
    for (int64_t e = 0; e < E; ++e) {  // in edge order, as before: the same sums
      if (d[e] < 0 || d[e] >= V) continue;
      for (int64_t h = 0; h < H; ++h) sum[d[e] * H + h] += ex[e * H + h];
    }
    // Scaled by the reciprocal, as edge_softmax above: the same rounding, so that a graph's COO and
    // grouped routes give the same attention (GAT's output with and without its weights returned).
    for (acc_t& total : sum) total = acc_t(1) / (total + acc_t(1e-16));
    at::parallel_for(0, E, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(H, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) {
        const bool ok = d[e] >= 0 && d[e] < V;
        for (int64_t h = 0; h < H; ++h)
          o[e * H + h] = ok ? static_cast<scalar_t>(ex[e * H + h] * sum[d[e] * H + h]) : scalar_t(0);
      }
    });
    if (bad) flags.fill_(1);
  });
  return {out, flags};
}

at::Tensor edge_softmax_coo_backward(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& index,
                                     int64_t num_nodes) {
  check_edge_softmax_coo_backward_args(out, grad_out, index, num_nodes);
  auto grad_src = at::empty_like(out);
  const int64_t E = out.size(0), H = out.size(1), V = num_nodes;
  const int64_t* d = index.const_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "edge_softmax_coo_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* y = out.const_data_ptr<scalar_t>();
    const scalar_t* g = grad_out.const_data_ptr<scalar_t>();
    scalar_t* gs = grad_src.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> dot(V * H, acc_t(0));
    for (int64_t e = 0; e < E; ++e) {
      if (d[e] < 0 || d[e] >= V) continue;
      for (int64_t h = 0; h < H; ++h)
        dot[d[e] * H + h] += static_cast<acc_t>(y[e * H + h]) * static_cast<acc_t>(g[e * H + h]);
    }
    for (int64_t e = 0; e < E; ++e)
      for (int64_t h = 0; h < H; ++h) {
        const bool ok = d[e] >= 0 && d[e] < V;
        gs[e * H + h] = ok ? static_cast<scalar_t>(static_cast<acc_t>(y[e * H + h]) *
                                                   (static_cast<acc_t>(g[e * H + h]) - dot[d[e] * H + h]))
                           : scalar_t(0);
      }
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("edge_softmax", &edge_softmax);
  m.impl("edge_softmax_backward", &edge_softmax_backward);
  m.impl("edge_softmax_coo", &edge_softmax_coo);
  m.impl("edge_softmax_coo_backward", &edge_softmax_coo_backward);
}

}  // namespace pyg_fast::cpu
