// CUDA binding of cuthill_mckee; the kernel in kernels/cuthill_mckee.cuh.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "../ops/cuthill_mckee.h"
#include "kernels/cuthill_mckee.cuh"

namespace pyg_fast::cuda {
namespace {

constexpr int64_t kMaxBlocks = 1 << 16;  // the kernel strides over communities beyond this

at::Tensor cuthill_mckee(const at::Tensor& ptr, const at::Tensor& col, const at::Tensor& roots,
                         const at::Tensor& community_ptr, int64_t max_community_size) {
  check_cuthill_mckee_args(ptr, col, roots, community_ptr);
  const c10::cuda::CUDAGuard guard(roots.device());
  const int64_t V = roots.numel(), E = col.numel(), C = community_ptr.numel() - 1;
  auto position = at::full({V}, -1, roots.options());
  if (V == 0 || C == 0) return position;
  auto queue = at::empty({V}, roots.options());
  const int64_t blocks = std::min(kMaxBlocks, (C + kCuthillMcKeeWarpsPerBlock - 1) / kCuthillMcKeeWarpsPerBlock);
  cuthill_mckee_kernel<<<blocks, kCuthillMcKeeWarpsPerBlock * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      ptr.const_data_ptr<int64_t>(), col.const_data_ptr<int64_t>(), roots.const_data_ptr<int64_t>(),
      community_ptr.const_data_ptr<int64_t>(), V, E, C, max_community_size, position.mutable_data_ptr<int64_t>(),
      queue.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return position;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("cuthill_mckee", &cuthill_mckee); }

}  // namespace pyg_fast::cuda
