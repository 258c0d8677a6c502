// CPU kernel of one label propagation round: the per-node rule of
// ../cuda/kernels/label_propagation.cuh (host + device code) over every node.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <atomic>

#include "../cuda/kernels/label_propagation.cuh"
#include "../ops/label_propagation.h"

namespace pyg_fast::cpu {
namespace {

using namespace pyg_fast::cuda;

constexpr int64_t kNodesPerTask = 2048;

at::Tensor label_propagation_round(const at::Tensor& labels, const at::Tensor& ptr, const at::Tensor& col,
                                   int64_t seed, int64_t round, at::Tensor& changed) {
  check_label_propagation_round_args(labels, ptr, col, changed);
  auto out = at::empty_like(labels);  // every node is written
  const int64_t V = labels.numel(), E = col.numel();
  const LabelPropagationDraws draws(seed, round);
  std::atomic<int> errors{0};
  std::atomic<int64_t> moved{0};
  AT_DISPATCH_INDEX_TYPES(labels.scalar_type(), "label_propagation_round", [&] {
    const index_t* l = labels.const_data_ptr<index_t>();
    const index_t* c = col.const_data_ptr<index_t>();
    const int64_t* p = ptr.const_data_ptr<int64_t>();
    index_t* w = out.mutable_data_ptr<index_t>();
    if (E > 0 && (c[0] < 0 || c[0] >= V)) errors |= kLabelPropagationBadNeighbour;
    const index_t filler = label_propagation_filler(l, c, V, E);
    at::parallel_for(0, V, kNodesPerTask, [&](int64_t begin, int64_t end) {
      int error = 0;
      int64_t count = 0;
      for (int64_t node = begin; node < end; ++node) {
        const index_t next = label_propagation_next(l, p, c, V, E, node, filler, draws, error);
        w[node] = next;
        count += next != l[node];
      }
      errors |= error;
      moved += count;
    });
  });
  const int error = errors;
  PF_CHECK_VALUE(!(error & kLabelPropagationBadPtr), "pyg_fast: 'ptr' must be non-decreasing, start at >= 0 and ",
                 "end at <= ", E, " (the size of 'col')");
  PF_CHECK_INDEX(!(error & kLabelPropagationBadNeighbour), "pyg_fast: 'col' holds ids outside [0, ", V, ")");
  changed.add_(moved.load());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("label_propagation_round", &label_propagation_round); }

}  // namespace pyg_fast::cpu
