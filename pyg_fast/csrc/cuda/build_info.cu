#include <cstdint>
#include <vector>

namespace pyg_fast {

// nvcc defines __CUDA_ARCH_LIST__ as the architectures named by -gencode (e.g. 900).
std::vector<int64_t> cuda_arch_list() { return {__CUDA_ARCH_LIST__}; }

}  // namespace pyg_fast
