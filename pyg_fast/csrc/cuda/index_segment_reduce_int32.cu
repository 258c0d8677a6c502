// index_segment_reduce's kernels over int32 source indices (see gathered_launch.cuh).
#include "gathered_launch.cuh"

namespace pyg_fast::cuda {

template void launch_gathered<int32_t>(const SegmentConfig&, const GraphLayout&, Reduce, const at::Tensor&,
                                       const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       at::Tensor&);

}  // namespace pyg_fast::cuda
