// Schemas of the gather-fused segment reduction. Kernels: cpu/index_segment_reduce.cpp,
// cuda/index_segment_reduce.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[r] = reduce_{e in ptr[r]:ptr[r+1]} weight[e] * x[src_index[e]] for x [N, F] -> out [V, F].
  // weight [E, H] scales head h = f / (F / H) of each message; None means 1. config and
  // schedule_data: the CUDA schedule and its per-graph layout, as for segment_reduce.
  m.def(
      "index_segment_reduce(Tensor x, Tensor src_index, Tensor ptr, Tensor? weight, str reduce, "
      "int[] config=[], Tensor? schedule_data=None) -> Tensor");
  // Per-edge gradient of the messages weight[e] * x[src_index[e]] for max/min: grad_out of the
  // row where the message is the extremum, split evenly among ties; [E, F].
  m.def(
      "index_segment_reduce_extremum_backward(Tensor grad_out, Tensor x, Tensor src_index, "
      "Tensor ptr, Tensor? weight, Tensor out) -> Tensor");
}
