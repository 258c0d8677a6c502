// Schema-level argument checks of edge_softmax, shared by its CPU and CUDA kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// src: [E, H] values of edges grouped by destination through the CSR pointer ptr [V + 1];
// lanes: 0 (the kernel's choice) or the CUDA kernel's lanes per row, a power of two in [H, 32].
inline void check_edge_softmax_args(const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
  check_floating(src, "src");
  check_ptr(ptr);
  check_same_device(src, ptr, "src", "ptr");
  PF_CHECK_VALUE(src.dim() == 2, "pyg_fast: edge_softmax expects 'src' of shape [E, H], got ",
                    src.sizes());
  PF_CHECK_VALUE(lanes == 0 || (lanes >= src.size(1) && lanes <= 32 && (lanes & (lanes - 1)) == 0),
                 "pyg_fast: edge_softmax 'lanes' must be 0 or a power of two from H (", src.size(1),
                 ") to 32, got ", lanes);
}

// grad_out: the gradient of a softmax output `out`, same device, dtype and shape.
inline void check_softmax_grad(const at::Tensor& out, const at::Tensor& grad_out) {
  check_floating(grad_out, "grad_out");
  check_same_device(out, grad_out, "out", "grad_out");
  PF_CHECK_TYPE(out.scalar_type() == grad_out.scalar_type(),
                   "pyg_fast: 'grad_out' must have the dtype of 'out' (", out.scalar_type(), "), got ",
                   grad_out.scalar_type());
  PF_CHECK_VALUE(out.sizes() == grad_out.sizes(), "pyg_fast: 'grad_out' has shape ",
                    grad_out.sizes(), " but 'out' has shape ", out.sizes());
}

inline void check_edge_softmax_backward_args(const at::Tensor& out, const at::Tensor& grad_out,
                                             const at::Tensor& ptr, int64_t lanes) {
  check_edge_softmax_args(out, ptr, lanes);
  check_softmax_grad(out, grad_out);
}

// src: [E, H] values of edges in any order, index [E] their destinations in [0, num_nodes).
inline void check_edge_softmax_coo_args(const at::Tensor& src, const at::Tensor& index, int64_t num_nodes) {
  check_floating(src, "src");
  check_index(index, "index");
  check_same_device(src, index, "src", "index");
  PF_CHECK_VALUE(src.dim() == 2, "pyg_fast: edge_softmax expects 'src' of shape [E, H], got ", src.sizes());
  PF_CHECK_VALUE(index.numel() == src.size(0), "pyg_fast: 'index' has ", index.numel(),
                 " entries but 'src' has ", src.size(0), " rows");
  PF_CHECK_VALUE(num_nodes >= 0, "pyg_fast: num_nodes must be non-negative, got ", num_nodes);
}

inline void check_edge_softmax_coo_backward_args(const at::Tensor& out, const at::Tensor& grad_out,
                                                 const at::Tensor& index, int64_t num_nodes) {
  check_edge_softmax_coo_args(out, index, num_nodes);
  check_softmax_grad(out, grad_out);
}

}  // namespace pyg_fast
