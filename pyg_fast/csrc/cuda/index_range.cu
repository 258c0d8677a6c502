#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "../ops/index_range.h"
#include "coo_launch.cuh"
#include "flag_ring.cuh"
#include "kernels/index_range.cuh"

namespace pyg_fast::cuda {
namespace {

at::Tensor index_range_flags(at::TensorList indices, c10::IntArrayRef sizes, int64_t flag_slot) {
  check_index_range_args(indices, sizes);
  const c10::cuda::CUDAGuard guard(indices[0].device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int count = static_cast<int>(indices.size());
  const FlagBuffer flags = flag_buffer(count, flag_slot, indices[0].options());
  IndexRanges<kIndexRangeMaxIndices> ranges{};
  int64_t most = 0;
  for (int k = 0; k < count; ++k) {
    ranges.values[k] = indices[k].const_data_ptr<int64_t>();
    ranges.numel[k] = indices[k].numel();
    ranges.size[k] = static_cast<uint64_t>(sizes[k]);
    most = std::max(most, ranges.numel[k]);
  }
  if (most == 0) return flags.tensor;
  index_range_kernel<<<dim3(static_cast<unsigned>(coo_blocks(most)), count), kCooThreads, 0, stream>>>(
      ranges, flags.data);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return flags.tensor;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("index_range_flags", &index_range_flags); }

}  // namespace pyg_fast::cuda
