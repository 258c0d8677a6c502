// Schemas of the segment reduction ops. Kernels: cpu/segment_reduce.cpp, cuda/segment_reduce.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[b, r] = reduce(src[b, ptr[r]:ptr[r+1]]) for src [B, E, F], ptr [V+1] -> out [B, V, F].
  // config selects the CUDA schedule (pyg_fast/tuning); [] means the default. schedule_data is the
  // per-graph layout the graph-aware schedules read (groups, balanced; see cuda/segment_launch.cuh).
  m.def(
      "segment_reduce(Tensor src, Tensor ptr, str reduce, int[] config=[], Tensor? schedule_data=None) "
      "-> Tensor");
  // Gradient w.r.t. src [B, num_rows, F]. src and out are needed (and read) only by max/min,
  // which split the gradient evenly among tied extrema.
  m.def(
      "segment_reduce_backward(Tensor grad_out, Tensor? src, Tensor? out, Tensor ptr, str reduce, "
      "SymInt num_rows) -> Tensor");
}
