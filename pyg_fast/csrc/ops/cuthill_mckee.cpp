// Schema of the per-community Cuthill-McKee order. Kernels: cpu/cuthill_mckee.cpp,
// cuda/cuthill_mckee.cu (the warp loop in cuda/kernels/cuthill_mckee.cuh).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Cuthill-McKee positions of the nodes of every community of at most max_community_size nodes
  // (-1 for the nodes of larger communities). community_ptr [C + 1] splits roots [V] into the
  // communities' nodes, each community's sorted by (degree, id); ptr [V + 1] and col give every
  // node's neighbours inside its community, sorted by (degree, id) (repeats next to each other;
  // the CPU kernel sorts each node's new neighbours itself and takes the lists in any order).
  // Community c's nodes get positions community_ptr[c] .. community_ptr[c + 1] - 1 in BFS order:
  // each BFS starts at the community's first unvisited root, a node's unvisited neighbours
  // follow in list order.
  m.def("cuthill_mckee(Tensor ptr, Tensor col, Tensor roots, Tensor community_ptr, int max_community_size) -> Tensor");
}
