// Schema-level argument checks of cuthill_mckee, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// ptr [V + 1], col [E'], roots [V] and community_ptr [C + 1]: int64, contiguous, one device.
inline void check_cuthill_mckee_args(const at::Tensor& ptr, const at::Tensor& col, const at::Tensor& roots,
                                     const at::Tensor& community_ptr) {
  check_ptr(ptr);
  check_index(col, "col");
  check_index(roots, "roots");
  PF_CHECK_VALUE(ptr.numel() == roots.numel() + 1, "pyg_fast: 'ptr' must have V + 1 = ", roots.numel() + 1,
                 " entries (V = the size of 'roots'), got ", ptr.numel());
  PF_CHECK_VALUE(community_ptr.dim() == 1 && community_ptr.numel() >= 1,
                 "pyg_fast: 'community_ptr' must be a non-empty 1-D tensor, got shape ", community_ptr.sizes());
  PF_CHECK_TYPE(community_ptr.scalar_type() == at::kLong, "pyg_fast: 'community_ptr' must be int64, got ",
                community_ptr.scalar_type());
  PF_CHECK_VALUE(community_ptr.is_contiguous(), "pyg_fast: 'community_ptr' must be contiguous");
  check_same_device(col, ptr, "col", "ptr");
  check_same_device(roots, ptr, "roots", "ptr");
  check_same_device(community_ptr, ptr, "community_ptr", "ptr");
}

}  // namespace pyg_fast
