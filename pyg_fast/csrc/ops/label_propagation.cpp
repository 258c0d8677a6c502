// Schema of one label propagation round. Kernels: cpu/label_propagation.cpp,
// cuda/label_propagation.cu; the per-node rule in cuda/kernels/label_propagation.cuh.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Returns a copy of labels [V] in which every node nodes[i] holds the label it adopts: the
  // most frequent among its own and 16 sampled neighbours' labels (col[ptr[v]:ptr[v + 1]],
  // sampled from offset[i]), ties broken by priority [P] of the labels, all read from labels
  // as given. Adds the number of nodes whose label changed to changed (one int64, in place).
  m.def("label_propagation_round(Tensor labels, Tensor ptr, Tensor col, Tensor nodes, Tensor offset, "
        "Tensor priority, Tensor(a!) changed) -> Tensor");
}
