// Schema of the sampled dense-dense edge op. Kernels: cpu/sddmm.cpp, cuda/sddmm.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // For every edge e: a[a_index[e]] op b[b_index[e]] over a [Na, H, D], b [Nb, H, D].
  // op "dot" sums over D -> [E, H]; "add", "sub", "mul", "div" -> [E, H, D]. An edge with an index
  // out of range gets zeros (the callers check and report the indices).
  m.def("sddmm(Tensor a, Tensor b, Tensor a_index, Tensor b_index, str op) -> Tensor");
}
