// Schema of segment_arg_reduce. Kernels: cpu/segment_arg_reduce.cpp, cuda/segment_arg_reduce.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // For src [B, E, F], ptr [V + 1] and the row order perm [E] (identity if none): out[b, r, f] =
  // max, min or product of src[b, perm[k], f] over k in ptr[r]:ptr[r+1], and for max/min arg[b, r,
  // f] = the row perm[k] of the first extremum met (E for an empty segment); for mul arg is empty.
  // Any real dtype (the product accumulates in float32 for float16/bfloat16). The semantics of
  // torch_scatter's min/max/mul, which the tuned segment_reduce kernels do not have (no argument,
  // floating point only, no product); ptr may cover part of the rows.
  m.def("segment_arg_reduce(Tensor src, Tensor ptr, Tensor? perm, str reduce) -> (Tensor, Tensor)");
}
