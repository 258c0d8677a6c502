// Schema-level argument checks of sample_offsets, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// deg [P] int64; k >= 0; seed: one int64 on deg's device.
inline void check_sample_offsets_args(const at::Tensor& deg, int64_t k, const at::Tensor& seed) {
  PF_CHECK_VALUE(deg.dim() == 1, "pyg_fast: sample_offsets expects 1-D 'deg', got shape ", deg.sizes());
  PF_CHECK_TYPE(deg.scalar_type() == at::kLong, "pyg_fast: 'deg' must be int64, got ", deg.scalar_type());
  PF_CHECK_VALUE(deg.is_contiguous(), "pyg_fast: 'deg' must be contiguous");
  PF_CHECK_VALUE(k >= 0, "pyg_fast: sample_offsets draws k >= 0 offsets a node, got k = ", k);
  PF_CHECK_TYPE(seed.scalar_type() == at::kLong, "pyg_fast: 'seed' must be int64, got ", seed.scalar_type());
  PF_CHECK_VALUE(seed.numel() == 1, "pyg_fast: 'seed' must hold one value, got shape ", seed.sizes());
  check_same_device(seed, deg, "seed", "deg");
}

}  // namespace pyg_fast
