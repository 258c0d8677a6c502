#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <atomic>

#include "../ops/index_segment_reduce.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// Message e, feature f: weight[e, f / D] * x[src_index[e], f], in acc_t.
template <typename scalar_t, typename acc_t>
struct Messages {
  const scalar_t* x;
  const int64_t* src_index;
  const scalar_t* weight;  // nullptr: unweighted
  int64_t num_nodes, num_features, num_heads;
  std::atomic<bool>* bad_index;

  // Calls emit(f, value) for every feature f < nf (== num_features) of message e; false if
  // src_index[e] is out of range.
  template <typename Features, typename Emit>
  bool for_each(int64_t e, Features nf, const Emit& emit) const {
    const int64_t j = src_index[e];
    if (j < 0 || j >= num_nodes) {
      *bad_index = true;
      return false;
    }
    const scalar_t* row = x + j * num_features;
    if (weight == nullptr || num_heads == 1) {  // one scale for the whole row
      const acc_t w = weight == nullptr ? acc_t(1) : static_cast<acc_t>(weight[e]);
      for (int64_t f = 0; f < nf; ++f) emit(f, w * static_cast<acc_t>(row[f]));
      return true;
    }
    const int64_t D = num_features / num_heads;
    for (int64_t h = 0; h < num_heads; ++h) {
      const acc_t w = static_cast<acc_t>(weight[e * num_heads + h]);
      for (int64_t d = 0; d < D; ++d) emit(h * D + d, w * static_cast<acc_t>(row[h * D + d]));
    }
    return true;
  }
};

void check_bad_index(const std::atomic<bool>& bad_index, int64_t num_nodes) {
  PF_CHECK_INDEX(!bad_index, "pyg_fast: 'src_index' holds a value outside [0, ", num_nodes,
                    ") (the number of rows of 'x')");
}

at::Tensor index_segment_reduce(const at::Tensor& x, const at::Tensor& src_index,
                                const at::Tensor& ptr, const std::optional<at::Tensor>& weight,
                                c10::string_view reduce, c10::IntArrayRef /*config: CUDA only*/,
                                const std::optional<at::Tensor>& /*schedule_data: CUDA only*/) {
  check_index_segment_reduce_args(x, src_index, ptr, weight);
  const Reduce op = parse_reduce(std::string(reduce));
  const int64_t N = x.size(0), F = x.size(1), V = ptr.numel() - 1, E = src_index.numel();
  auto out = at::empty({V, F}, x.options());
  std::atomic<bool> bad_index{false};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "index_segment_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const Messages<scalar_t, acc_t> msg{x.const_data_ptr<scalar_t>(), src_index.const_data_ptr<int64_t>(),
                                        weight ? weight->const_data_ptr<scalar_t>() : nullptr, N, F,
                                        weight ? weight->size(1) : 1, &bad_index};
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    PF_DISPATCH_REDUCE(op, [&] {
      for_each_segment<acc_t, R>(
          ptr.const_data_ptr<int64_t>(), 1, V, F, E,
          [&](acc_t* acc, int64_t, int64_t, int64_t e, auto nf) {
            msg.for_each(e, nf, [&](int64_t f, acc_t v) { acc[f] = Reducer<R, acc_t>::update(acc[f], v); });
          },
          [&](const acc_t* acc, int64_t, int64_t r, int64_t count, auto nf) {
            for (int64_t f = 0; f < nf; ++f)
              o[r * F + f] = static_cast<scalar_t>(Reducer<R, acc_t>::finalize(acc[f], count));
          });
    });
  });
  check_bad_index(bad_index, N);
  return out;
}

at::Tensor index_segment_reduce_extremum_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                  const at::Tensor& src_index, const at::Tensor& ptr,
                                                  const std::optional<at::Tensor>& weight,
                                                  const at::Tensor& out) {
  check_index_segment_reduce_args(x, src_index, ptr, weight);
  const int64_t N = x.size(0), F = x.size(1), V = ptr.numel() - 1, E = src_index.numel();
  auto g_out = grad_out.contiguous();
  auto grad_msg = at::zeros({E, F}, x.options());
  std::atomic<bool> bad_index{false};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "index_segment_reduce_extremum_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const Messages<scalar_t, acc_t> msg{x.const_data_ptr<scalar_t>(), src_index.const_data_ptr<int64_t>(),
                                        weight ? weight->const_data_ptr<scalar_t>() : nullptr, N, F,
                                        weight ? weight->size(1) : 1, &bad_index};
    const scalar_t* o = out.const_data_ptr<scalar_t>();
    const scalar_t* go = g_out.const_data_ptr<scalar_t>();
    scalar_t* gm = grad_msg.mutable_data_ptr<scalar_t>();
    const int64_t* p = ptr.const_data_ptr<int64_t>();
    // A message ties with the output when it rounds to the stored extremum.
    auto is_best = [&](int64_t r, int64_t f, acc_t v) { return static_cast<scalar_t>(v) == o[r * F + f]; };
    for_each_segment<acc_t, Reduce::Sum>(
        p, 1, V, F, E,
        [&](acc_t* ties, int64_t, int64_t r, int64_t e, auto nf) {
          msg.for_each(e, nf, [&](int64_t f, acc_t v) { ties[f] += is_best(r, f, v) ? acc_t(1) : acc_t(0); });
        },
        [&](const acc_t* ties, int64_t, int64_t r, int64_t count, auto nf) {
          for (int64_t e = p[r]; e < p[r] + count; ++e)
            msg.for_each(e, nf, [&](int64_t f, acc_t v) {
              if (is_best(r, f, v))
                gm[e * F + f] = static_cast<scalar_t>(static_cast<acc_t>(go[r * F + f]) / ties[f]);
            });
        });
  });
  check_bad_index(bad_index, N);
  return grad_msg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("index_segment_reduce", &index_segment_reduce);
  m.impl("index_segment_reduce_extremum_backward", &index_segment_reduce_extremum_backward);
}

}  // namespace pyg_fast::cpu
