// Build facts for pyg_fast.show_config(): which CUDA architectures the kernels were built for.
#include <torch/library.h>

#include <vector>

namespace pyg_fast {

#ifdef WITH_CUDA
std::vector<int64_t> cuda_arch_list();  // cuda/build_info.cu
#else
std::vector<int64_t> cuda_arch_list() { return {}; }
#endif

}  // namespace pyg_fast

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Compute capabilities (e.g. 900) of the CUDA kernels in this build; empty without CUDA.
  m.def("cuda_arch_list() -> int[]", &pyg_fast::cuda_arch_list);
}
