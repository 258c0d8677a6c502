#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <type_traits>

#include "../ops/index_segment_reduce.h"
#include "segment_walk.h"

namespace pyg_fast::cpu {
namespace {

// Message e, feature f: weight[e, f / D] * x[src_index[e], f], in acc_t.
template <typename scalar_t, typename acc_t>
class Messages {
 public:
  Messages(const at::Tensor& x, const at::Tensor& src_index, const std::optional<at::Tensor>& weight)
      : x_(x.const_data_ptr<scalar_t>()),
        src_index_(src_index.const_data_ptr<int64_t>()),
        weight_(weight ? weight->const_data_ptr<scalar_t>() : nullptr),
        num_nodes_(x.size(0)),
        num_features_(x.size(1)),
        num_heads_(weight ? weight->size(1) : 1),
        num_edges_(src_index.numel()),
        prefetch_(prefetch_distance(num_features_ * static_cast<int64_t>(sizeof(scalar_t)))) {}

  // Calls emit(f, value) for every feature f < nf (== num_features) of message e; false if
  // src_index[e] is out of range. kHeads: a weight per head (num_heads > 1), a compile-time
  // choice so that the one-weight loop indexes the accumulators by constants only.
  template <bool kHeads, typename Features, typename Emit>
  bool for_each(int64_t e, Features nf, const Emit& emit) const {
    // Every member is read up front, on each call: loads done on every path are hoisted out of
    // the caller's edge loop, those behind the range check were repeated per edge.
    const scalar_t* x = x_;
    const int64_t* src_index = src_index_;
    const scalar_t* weight = weight_;
    const auto num_nodes = static_cast<uint64_t>(num_nodes_);
    const int64_t num_edges = num_edges_, prefetch = prefetch_;
    const int64_t row_bytes = nf * static_cast<int64_t>(sizeof(scalar_t));
    // A compile-time constant for fixed counts: small rows compile without the prefetch.
    if (row_bytes >= kPrefetchMinRowBytes && prefetch > 0 && e + prefetch < num_edges) {
      const auto ahead = static_cast<uint64_t>(src_index[e + prefetch]);
      if (ahead < num_nodes) prefetch_bytes(x + ahead * nf, row_bytes);
    }
    const auto j = static_cast<uint64_t>(src_index[e]);  // negative values wrap to huge ones
    if (j >= num_nodes) return false;
    const scalar_t* row = x + j * nf;
    if constexpr (!kHeads) {  // one scale for the whole row
      const acc_t w = weight == nullptr ? acc_t(1) : static_cast<acc_t>(weight[e]);
      for (int64_t f = 0; f < nf; ++f) emit(f, w * static_cast<acc_t>(row[f]));
    } else {
      const int64_t H = num_heads_, D = nf / H;
      for (int64_t h = 0; h < H; ++h) {
        const acc_t w = static_cast<acc_t>(weight[e * H + h]);
        for (int64_t d = 0; d < D; ++d) emit(h * D + d, w * static_cast<acc_t>(row[h * D + d]));
      }
    }
    return true;
  }

  // Runs fn(std::bool_constant<kHeads>{}) for this weight layout.
  template <typename Fn>
  void with_heads(const Fn& fn) const {
    if (weight_ != nullptr && num_heads_ > 1) {
      fn(std::true_type{});
    } else {
      fn(std::false_type{});
    }
  }

 private:
  const scalar_t* x_;
  const int64_t* src_index_;
  const scalar_t* weight_;  // nullptr: unweighted
  int64_t num_nodes_, num_features_, num_heads_, num_edges_;  // num_features_ == nf of for_each
  int64_t prefetch_;  // edges ahead
};

void check_src_index(bool in_range, int64_t num_nodes) {
  PF_CHECK_INDEX(in_range, "pyg_fast: 'src_index' holds a value outside [0, ", num_nodes,
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
  bool in_range = true;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "index_segment_reduce", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const Messages<scalar_t, acc_t> msg(x, src_index, weight);
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    PF_DISPATCH_REDUCE(op, [&] {
      msg.with_heads([&](auto heads) {
        in_range = for_each_segment<acc_t, R>(
            ptr.const_data_ptr<int64_t>(), 1, V, F, E,
            [&](acc_t* acc, int64_t, int64_t, int64_t e, auto nf) {
              return msg.template for_each<heads>(e, nf, [&](int64_t f, acc_t v) {
                acc[f] = Reducer<R, acc_t>::update(acc[f], v);
              });
            },
            [&](const acc_t* acc, int64_t, int64_t r, int64_t count, auto nf) {
              for (int64_t f = 0; f < nf; ++f)
                o[r * F + f] = static_cast<scalar_t>(Reducer<R, acc_t>::finalize(acc[f], count));
            });
      });
    });
  });
  check_src_index(in_range, N);
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
  bool in_range = true;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "index_segment_reduce_extremum_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const Messages<scalar_t, acc_t> msg(x, src_index, weight);
    const scalar_t* o = out.const_data_ptr<scalar_t>();
    const scalar_t* go = g_out.const_data_ptr<scalar_t>();
    scalar_t* gm = grad_msg.mutable_data_ptr<scalar_t>();
    const int64_t* p = ptr.const_data_ptr<int64_t>();
    // A message ties with the output when it rounds to the stored extremum.
    auto is_best = [&](int64_t r, int64_t f, acc_t v) { return static_cast<scalar_t>(v) == o[r * F + f]; };
    msg.with_heads([&](auto heads) {
      // The fold counts ties of each feature; the write hands out the gradient (the fold has
      // checked every index of the row by then).
      in_range = for_each_segment<acc_t, Reduce::Sum>(
          p, 1, V, F, E,
          [&](acc_t* ties, int64_t, int64_t r, int64_t e, auto nf) {
            return msg.template for_each<heads>(e, nf, [&](int64_t f, acc_t v) {
              ties[f] += is_best(r, f, v) ? acc_t(1) : acc_t(0);
            });
          },
          [&](const acc_t* ties, int64_t, int64_t r, int64_t count, auto nf) {
            for (int64_t e = p[r]; e < p[r] + count; ++e)
              msg.template for_each<heads>(e, nf, [&](int64_t f, acc_t v) {
                if (is_best(r, f, v))
                  gm[e * F + f] = static_cast<scalar_t>(static_cast<acc_t>(go[r * F + f]) / ties[f]);
              });
          });
    });
  });
  check_src_index(in_range, N);
  return grad_msg;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("index_segment_reduce", &index_segment_reduce);
  m.impl("index_segment_reduce_extremum_backward", &index_segment_reduce_extremum_backward);
}

}  // namespace pyg_fast::cpu
