// Schema of the argument pass of scatter max/min. Kernels: cpu/scatter_arg.cpp, cuda/scatter_arg.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Given the extrema out[b, v, f] of src's rows grouped by index, returns [B, V, F] int64: the
  // first row j with index[j] == v and src[b, j, f] equal to out[b, v, f] (NaN matching NaN), E
  // where none does. Rows whose index lies outside [0, V) are skipped.
  m.def("scatter_arg(Tensor src, Tensor index, Tensor out) -> Tensor");
}
