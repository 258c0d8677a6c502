#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "../ops/sddmm.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

template <EdgeOp OP, typename acc_t>
inline acc_t apply(acc_t a, acc_t b) {
  if constexpr (OP == EdgeOp::Add) return a + b;
  if constexpr (OP == EdgeOp::Sub) return a - b;
  if constexpr (OP == EdgeOp::Div) return a / b;
  return a * b;  // Mul, and the products summed by Dot
}

at::Tensor sddmm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index,
                 const at::Tensor& b_index, c10::string_view op_name, int64_t /*flag_slot*/) {
  check_sddmm_args(a, b, a_index, b_index);
  const EdgeOp op = parse_edge_op(std::string(op_name));
  const int64_t E = a_index.numel(), H = a.size(1), D = a.size(2), Na = a.size(0), Nb = b.size(0);
  auto out = op == EdgeOp::Dot ? at::empty({E, H}, a.options()) : at::empty({E, H, D}, a.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "sddmm", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* pa = a.const_data_ptr<scalar_t>();
    const scalar_t* pb = b.const_data_ptr<scalar_t>();
    const int64_t* ia = a_index.const_data_ptr<int64_t>();
    const int64_t* ib = b_index.const_data_ptr<int64_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    // Both rows of an edge lie in random places: prefetched a few edges ahead (segment_walk.h).
    // 1.17 M edges, 2 threads, dot, ms: D = 16 36-47 -> 8.5-18, D = 64 122-125 -> 46-50, D = 128
    // 182-189 -> 103-113, 4 heads of 16 113-129 -> 47-55.
    const int64_t row_bytes = H * D * static_cast<int64_t>(sizeof(scalar_t));
    const int64_t distance = prefetch_distance(row_bytes);
    auto run = [&](auto op_tag) {
      constexpr EdgeOp OP = decltype(op_tag)::value;
      at::parallel_for(0, E, std::max<int64_t>(1, kGrainSize / (H * D)), [&](int64_t lo, int64_t hi) {
        for (int64_t e = lo; e < hi; ++e) {
          if (distance > 0 && e + distance < hi) {
            const int64_t ahead_a = ia[e + distance], ahead_b = ib[e + distance];
            if (ahead_a >= 0 && ahead_a < Na && ahead_b >= 0 && ahead_b < Nb) {
              prefetch_bytes(pa + ahead_a * H * D, row_bytes);
              prefetch_bytes(pb + ahead_b * H * D, row_bytes);
            }
          }
          const int64_t i = ia[e], j = ib[e];
          if (i < 0 || i >= Na || j < 0 || j >= Nb) {  // zeros, as on CUDA: the Python layer reports the index
            std::fill(o + e * H * (OP == EdgeOp::Dot ? 1 : D), o + (e + 1) * H * (OP == EdgeOp::Dot ? 1 : D),
                      scalar_t(0));
            continue;
          }
          const scalar_t* ra = pa + i * H * D;
          const scalar_t* rb = pb + j * H * D;
          for (int64_t h = 0; h < H; ++h) {
            if constexpr (OP == EdgeOp::Dot) {
              acc_t acc = 0;
              for (int64_t d = 0; d < D; ++d)
                acc += static_cast<acc_t>(ra[h * D + d]) * static_cast<acc_t>(rb[h * D + d]);
              o[e * H + h] = static_cast<scalar_t>(acc);
            } else {
              for (int64_t d = 0; d < D; ++d)
                o[(e * H + h) * D + d] = static_cast<scalar_t>(
                    apply<OP, acc_t>(static_cast<acc_t>(ra[h * D + d]), static_cast<acc_t>(rb[h * D + d])));
            }
          }
        }
      });
    };
    switch (op) {
      case EdgeOp::Dot: run(std::integral_constant<EdgeOp, EdgeOp::Dot>{}); break;
      case EdgeOp::Add: run(std::integral_constant<EdgeOp, EdgeOp::Add>{}); break;
      case EdgeOp::Sub: run(std::integral_constant<EdgeOp, EdgeOp::Sub>{}); break;
      case EdgeOp::Mul: run(std::integral_constant<EdgeOp, EdgeOp::Mul>{}); break;
      case EdgeOp::Div: run(std::integral_constant<EdgeOp, EdgeOp::Div>{}); break;
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("sddmm", &sddmm); }

}  // namespace pyg_fast::cpu
