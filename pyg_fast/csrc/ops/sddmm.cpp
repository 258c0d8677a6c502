// Schema of the sampled dense-dense edge op. Kernels: cpu/sddmm.cpp, cuda/sddmm.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // For every edge e: a[a_index[e]] op b[b_index[e]] over a [Na, H, D], b [Nb, H, D].
  // op "dot" sums over D -> [E, H]; "add", "sub", "mul", "div" -> [E, H, D]. An edge with an index
  // out of range gets zeros; flag_slot >= 0 (CUDA) raises flag 0 (a_index) or 1 (b_index) of that
  // slot of the host ring (cuda/flag_ring.cuh) for it, else the callers check and report the indices.
  m.def("sddmm(Tensor a, Tensor b, Tensor a_index, Tensor b_index, str op, int flag_slot=-1) -> Tensor");
}
