// Schema of the neighbour sampler's draws. Kernels: cpu/sample_offsets.cpp, cuda/sample_offsets.cu;
// the per-node rule in cuda/kernels/sample_offsets.cuh.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Returns [P, k] int64: for each node i of degree deg[i], k neighbour offsets without
  // replacement: 0 .. deg[i] - 1 then -1 where deg[i] <= k, else k distinct offsets in
  // [0, deg[i]), each k-subset equally likely. The draws are a hash of (seed[0], i): the same on
  // every device.
  m.def("sample_offsets(Tensor deg, int k, Tensor seed) -> Tensor");
}
