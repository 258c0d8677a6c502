// Schemas of the per-graph preparation ops. Kernels: cpu/layout.cpp, cuda/layout.cu (the
// per-element rules in cuda/kernels/layout.cuh). pyg_fast/ops/_layout.py calls them.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // The rows of index [E] (int64) grouped by value with a stable sort into num_segments
  // segments: (ptr [V + 1], perm [E] (the rows in grouped order; empty where is_sorted),
  // src[perm] [E] (empty without src), flags int64 [3]). Values outside [0, V) are grouped after
  // every segment (ptr[V] counts the valid rows) and raise flags[0]; src values outside
  // [0, src_bound) raise flags[1] (src_bound < 0: unchecked); with is_sorted the index is taken
  // as it is, and a value below its predecessor raises flags[2]. flag_slot >= 0 (CUDA): the flags
  // are raised in that slot of the host ring (cuda/flag_ring.cuh) and come back empty.
  m.def("coo_to_csr(Tensor index, int num_segments, bool is_sorted, Tensor? src, int src_bound, int flag_slot=-1) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  // The segment of each of the num_rows rows of the CSR pointer ptr (rows past ptr[-1] get the
  // last segment): [num_rows] int64.
  m.def("csr_to_coo(Tensor ptr, int num_rows) -> Tensor");
  // A grouping by destination (src [E] in grouped order, ptr [V + 1], perm [E]: each row's input
  // position) with the self loops v -> v for v < num_loops inserted after each destination's
  // edges, at input positions E + v: (src [E + L], ptr [V + 1], perm [E + L]).
  m.def("looped_csr(Tensor src, Tensor ptr, Tensor perm, int num_loops) -> (Tensor, Tensor, Tensor)");
}
