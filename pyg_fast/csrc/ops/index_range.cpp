// Schema of the index range check. Kernels: cpu/index_range.cpp, cuda/index_range.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // int64 [k] for k indices: flags[i] = 1 where some value of indices[i] lies outside
  // [0, sizes[i]), else 0. One launch for all k on CUDA (an aminmax and its comparisons took four
  // per index), read by the host behind the kernels (pyg_fast.ops._deferred). flag_slot >= 0
  // (CUDA): the flags are raised in that slot of the host ring (cuda/flag_ring.cuh), and come back
  // empty.
  m.def("index_range_flags(Tensor[] indices, SymInt[] sizes, int flag_slot=-1) -> Tensor");
}
