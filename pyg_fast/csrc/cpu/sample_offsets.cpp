// CPU kernel of the neighbour sampler's draws: the per-node rule of
// ../cuda/kernels/sample_offsets.cuh (host + device code) over every node.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../cuda/kernels/sample_offsets.cuh"
#include "../ops/sample_offsets.h"

namespace pyg_fast::cpu {
namespace {

constexpr int64_t kNodesPerTask = 1024;

at::Tensor sample_offsets(const at::Tensor& deg, int64_t k, const at::Tensor& seed) {
  check_sample_offsets_args(deg, k, seed);
  const int64_t P = deg.numel();
  auto out = at::empty({P, k}, deg.options());
  if (P == 0 || k == 0) return out;
  const int64_t s = seed.item<int64_t>();  // host memory: no synchronisation
  const int64_t* d = deg.const_data_ptr<int64_t>();
  int64_t* o = out.mutable_data_ptr<int64_t>();
  at::parallel_for(0, P, kNodesPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t node = begin; node < end; ++node) {
      cuda::sample_offsets_of(d[node] < 0 ? 0 : d[node], k, cuda::sample_offsets_key(s, node), o + node * k);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("sample_offsets", &sample_offsets); }

}  // namespace pyg_fast::cpu
