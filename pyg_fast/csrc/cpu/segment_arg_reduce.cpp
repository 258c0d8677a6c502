#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../ops/segment_arg_reduce.h"

namespace pyg_fast::cpu {
namespace {

// Max/min of one segment (positions [begin, end), rows order[k] or k) and the first row holding
// each column's extremum, row by row over contiguous memory in two passes the compiler
// vectorises: the extrema, then the rows from the last to the first, where a row holding the
// extremum takes the column. A walk per column (one strided pass a feature, a data-dependent
// branch a value) took 716 us for 10.5 k rows x 16 into 2.7 k segments on one thread; the passes
// 120 us (the product's walk 64, the sum's kernel 22). A segment holding a NaN or an infinity
// (`poison`: v * 0 is NaN there) takes the walk, whose order decides between NaNs and numbers.
// The walk stays faster below kArgRowsFromFeatures columns (F = 4: 66 against 86 us, F = 8: 210
// against 100, same input) and for float16, whose conversion to float is a software routine that
// the passes run twice a value (F = 16: 1214 against 923 us; bfloat16's shift: 138 against 686).
constexpr int64_t kArgRowsFromFeatures = 8;
template <ArgReduce R, typename scalar_t>
bool by_rows(int64_t F) {
  return R != ArgReduce::Mul && F >= kArgRowsFromFeatures && !std::is_same_v<scalar_t, at::Half>;
}

template <ArgReduce R, typename scalar_t, typename acc_t>
void arg_extrema_rows(const scalar_t* src, const int64_t* order, int64_t begin, int64_t end, int64_t E, int64_t F,
                      acc_t* best, acc_t* poison, int32_t* offset, scalar_t* out, int64_t* arg) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min<int64_t>(end, E);
  const auto row_at = [&](int64_t k) { return src + (order ? order[k] : k) * F; };
  const bool walk = end - begin > std::numeric_limits<int32_t>::max();
  if (begin < end && !walk) {
    const scalar_t* first = row_at(begin);
    for (int64_t f = 0; f < F; ++f) {
      best[f] = static_cast<acc_t>(first[f]);
      poison[f] = best[f] * acc_t(0);
    }
    for (int64_t k = begin + 1; k < end; ++k) {
      const scalar_t* x = row_at(k);
      for (int64_t f = 0; f < F; ++f) {
        const acc_t v = static_cast<acc_t>(x[f]);
        best[f] = (R == ArgReduce::Max ? best[f] < v : v < best[f]) ? v : best[f];
        poison[f] += v * acc_t(0);
      }
    }
    bool clean = true;
    for (int64_t f = 0; f < F; ++f) clean &= poison[f] == poison[f];
    if (clean) {
      std::fill(offset, offset + F, 0);
      for (int64_t k = end - 1; k >= begin; --k) {
        const scalar_t* x = row_at(k);
        const int32_t d = static_cast<int32_t>(k - begin);
        for (int64_t f = 0; f < F; ++f) offset[f] = static_cast<acc_t>(x[f]) == best[f] ? d : offset[f];
      }
      for (int64_t f = 0; f < F; ++f) {
        out[f] = static_cast<scalar_t>(best[f]);
        arg[f] = order ? order[begin + offset[f]] : begin + offset[f];
      }
      return;
    }
  }
  for (int64_t f = 0; f < F; ++f)
    segment_arg_reduce_one<R, scalar_t, acc_t>(src + f, F, order, begin, end, E, out + f, arg + f);
}

std::tuple<at::Tensor, at::Tensor> segment_arg_reduce(const at::Tensor& src, const at::Tensor& ptr,
                                                      const std::optional<at::Tensor>& perm, c10::string_view reduce) {
  const ArgReduce op = check_segment_arg_reduce_args(src, ptr, perm, reduce);
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = ptr.numel() - 1;
  auto outputs = segment_arg_reduce_outputs(src, ptr, op);
  at::Tensor &out = std::get<0>(outputs), &arg = std::get<1>(outputs);
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  const int64_t* order = perm.has_value() ? perm->const_data_ptr<int64_t>() : nullptr;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_arg_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* s = src.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    int64_t* a = op == ArgReduce::Mul ? nullptr : arg.mutable_data_ptr<int64_t>();
    PF_DISPATCH_ARG_REDUCE(op, [&] {
      at::parallel_for(0, B * V, 64, [&](int64_t lo, int64_t hi) {
        std::vector<acc_t> best(by_rows<R, scalar_t>(F) ? F : 0), poison(best.size());
        std::vector<int32_t> offset(best.size());
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t b = i / V, r = i % V;
          if (!by_rows<R, scalar_t>(F)) {  // a segment's rows stay in cache across its F columns
            for (int64_t f = 0; f < F; ++f)
              segment_arg_reduce_one<R, scalar_t, acc_t>(s + b * E * F + f, F, order, p[r], p[r + 1], E,
                                                         o + i * F + f, a ? a + i * F + f : nullptr);
          } else {
            arg_extrema_rows<R, scalar_t, acc_t>(s + b * E * F, order, p[r], p[r + 1], E, F, best.data(),
                                                 poison.data(), offset.data(), o + i * F, a + i * F);
          }
        }
      });
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("segment_arg_reduce", &segment_arg_reduce); }

}  // namespace pyg_fast::cpu
