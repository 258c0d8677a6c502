// Schema of the COO gather-scatter: the gather-reduce of an index used too few times to be worth
// grouping (a sampled mini-batch's). Kernels: cpu/gather_scatter.cpp, cuda/gather_scatter.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // out[dst_index[e]] += weight[e, h] * x[src_index[e]] for every edge e, x [N, F] -> out
  // [num_rows, F]; src_index None: row e of x itself (a scatter, N == E). weight [E, H] scales
  // head h = f / (F / H); None means 1. With `mean`, row r is divided by its edge count (at
  // least 1), which comes back as `divisor` [num_rows] in x's dtype (empty otherwise). Edges
  // whose source or destination is out of range are skipped and raise flags[0] (source) or
  // flags[1] (destination) of the int64 [2] `flags`. Summed in float32 (float64 for float64)
  // with atomics on CUDA: the order of a row's terms is not fixed there.
  m.def(
      "gather_scatter(Tensor x, Tensor? src_index, Tensor dst_index, Tensor? weight, SymInt num_rows, "
      "bool mean) -> (Tensor out, Tensor divisor, Tensor flags)");
}
