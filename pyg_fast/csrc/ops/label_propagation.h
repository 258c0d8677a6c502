// Schema-level argument checks of label_propagation_round, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// labels [V] int32/int64; ptr [V + 1] int64 and col [E] (the dtype of labels): the adjacency in
// CSR form; changed: one int64.
inline void check_label_propagation_round_args(const at::Tensor& labels, const at::Tensor& ptr,
                                               const at::Tensor& col, const at::Tensor& changed) {
  PF_CHECK_VALUE(labels.dim() == 1, "pyg_fast: label_propagation_round expects 1-D 'labels', got shape ",
                 labels.sizes());
  PF_CHECK_TYPE(labels.scalar_type() == at::kInt || labels.scalar_type() == at::kLong,
                "pyg_fast: 'labels' must be int32 or int64, got ", labels.scalar_type());
  PF_CHECK_VALUE(labels.is_contiguous(), "pyg_fast: 'labels' must be contiguous");
  check_ptr(ptr);
  PF_CHECK_VALUE(ptr.numel() == labels.numel() + 1, "pyg_fast: 'ptr' must have V + 1 = ", labels.numel() + 1,
                 " entries (V = the size of 'labels'), got ", ptr.numel());
  PF_CHECK_VALUE(col.dim() == 1, "pyg_fast: 'col' must be 1-D, got shape ", col.sizes());
  PF_CHECK_TYPE(col.scalar_type() == labels.scalar_type(), "pyg_fast: 'col' must have the dtype of 'labels' (",
                labels.scalar_type(), "), got ", col.scalar_type());
  PF_CHECK_VALUE(col.is_contiguous(), "pyg_fast: 'col' must be contiguous");
  PF_CHECK_TYPE(changed.scalar_type() == at::kLong, "pyg_fast: 'changed' must be int64, got ",
                changed.scalar_type());
  PF_CHECK_VALUE(changed.numel() == 1, "pyg_fast: 'changed' must hold one value, got shape ", changed.sizes());
  check_same_device(ptr, labels, "ptr", "labels");
  check_same_device(col, labels, "col", "labels");
  check_same_device(changed, labels, "changed", "labels");
}

}  // namespace pyg_fast
