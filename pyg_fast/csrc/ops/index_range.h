// Schema-level argument checks of index_range_flags, shared by its CPU and CUDA kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include "../common/check.h"

namespace pyg_fast {

// The most indices one call checks: the flags fit one slot of pyg_fast.ops._deferred's ring.
constexpr int64_t kIndexRangeMaxIndices = 8;

// indices: 1 to kIndexRangeMaxIndices contiguous int64 tensors on one device; one size each.
inline void check_index_range_args(at::TensorList indices, c10::IntArrayRef sizes) {
  PF_CHECK_VALUE(!indices.empty() && static_cast<int64_t>(indices.size()) <= kIndexRangeMaxIndices,
                 "pyg_fast: index_range_flags checks 1 to ", kIndexRangeMaxIndices, " indices, got ",
                 indices.size());
  PF_CHECK_VALUE(indices.size() == sizes.size(), "pyg_fast: index_range_flags got ", indices.size(),
                 " indices but ", sizes.size(), " sizes");
  for (const int64_t size : sizes) {
    PF_CHECK_VALUE(size >= 0, "pyg_fast: index_range_flags got a negative size (", size, ")");
  }
  for (const at::Tensor& index : indices) {
    PF_CHECK_TYPE(index.scalar_type() == at::kLong, "pyg_fast: index_range_flags checks int64 indices, got ",
                  index.scalar_type());
    PF_CHECK_VALUE(index.is_contiguous(), "pyg_fast: index_range_flags checks contiguous indices");
    check_same_device(index, indices[0], "indices[i]", "indices[0]");
  }
}

}  // namespace pyg_fast
