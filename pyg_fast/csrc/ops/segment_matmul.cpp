// Schema of the segmented matmul used by heterogeneous GNNs. Kernels: cpu/segment_matmul.cpp,
// CUDA in Triton (pyg_fast/triton/segment_matmul.py, registered from pyg_fast/ops/segment_matmul.py).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[ptr[t]:ptr[t+1]] = input[ptr[t]:ptr[t+1]] @ other[t] (+ bias[t]); input [M, K], other [T, K, N].
  // ptr may live on the CPU while the data is on the GPU (no host sync to read it). deterministic only
  // matters for the backward pass (None: torch.are_deterministic_algorithms_enabled()).
  m.def("segment_matmul(Tensor input, Tensor ptr, Tensor other, Tensor? bias=None, bool? deterministic=None) -> Tensor");
  // Weight gradient: out[t] = input[ptr[t]:ptr[t+1]]^T @ grad_out[ptr[t]:ptr[t+1]], [T, K, N].
  // deterministic=True gives bitwise reproducible results on every device.
  m.def("segment_matmul_weight_grad(Tensor input, Tensor ptr, Tensor grad_out, bool deterministic) -> Tensor");
}
