// Schema of one label propagation round. Kernels: cpu/label_propagation.cpp,
// cuda/label_propagation.cu; the per-node rule in cuda/kernels/label_propagation.cuh.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Returns labels [V] after round `round` of label propagation with seed `seed`: the nodes of
  // the round's half adopt the most frequent label among their own and 16 sampled neighbours'
  // (col[ptr[v]:ptr[v + 1]]), ties broken by a random label order of the round, all read from
  // labels as given; the other nodes keep theirs. The draws are a hash of (seed, round, node or
  // label): the same on every device. Adds the number of nodes whose label changed to changed
  // (one int64, in place).
  m.def("label_propagation_round(Tensor labels, Tensor ptr, Tensor col, int seed, int round, "
        "Tensor(a!) changed) -> Tensor");
}
