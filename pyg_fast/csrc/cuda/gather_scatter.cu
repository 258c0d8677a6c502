#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <type_traits>

#include "../ops/gather_scatter.h"
#include "coo_launch.cuh"
#include "flag_ring.cuh"
#include "kernels/gather_scatter.cuh"

namespace pyg_fast::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_scatter(const at::Tensor& x,
                                                              const std::optional<at::Tensor>& src_index,
                                                              const at::Tensor& dst_index,
                                                              const std::optional<at::Tensor>& weight,
                                                              int64_t num_rows, bool mean, int64_t flag_slot,
                                                              c10::string_view site) {
  check_gather_scatter_args(x, src_index, dst_index, weight, num_rows);
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), F = x.size(1), E = dst_index.numel(), V = num_rows;
  const int64_t H = weight ? weight->size(1) : 1;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  // Flags kept on the device and a mean's edge counts share one zero fill (one launch less a call).
  const bool on_device = flag_slot == -1;
  const at::Tensor zeroed =
      on_device || mean ? zeros_async({(on_device ? 2 : 0) + (mean ? V : 0)}, dst_index.options()) : at::Tensor();
  const FlagBuffer flags =
      flag_slot >= 0         ? flag_buffer(2, flag_slot, dst_index.options())
      : at_site(flag_slot)   ? FlagBuffer{at::empty({0}, dst_index.options()), site_flags(text(site), N, V)}
      : on_device            ? FlagBuffer{zeroed.narrow(0, 0, 2), zeroed.mutable_data_ptr<int64_t>()}
                             : FlagBuffer{at::empty({0}, dst_index.options()), nullptr};
  auto divisor = at::empty({mean ? V : 0}, x.options());
  int64_t* counts = mean ? zeroed.mutable_data_ptr<int64_t>() + (on_device ? 2 : 0) : nullptr;
  auto* count_ptr = reinterpret_cast<unsigned long long*>(counts);
  const int64_t* src_ptr = src_index ? src_index->const_data_ptr<int64_t>() : nullptr;
  if (E > 0 && (mean || (F == 0 && flags.data != nullptr))) {  // without features no scatter checks the edges
    gather_scatter_count_kernel<<<coo_blocks(E), kGatherScatterThreads, 0, stream>>>(
        src_ptr, dst_index.const_data_ptr<int64_t>(), N, V, E, count_ptr, flags.data);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const bool scatter = E > 0 && F > 0;
  if (mean && !scatter) divisor.copy_(zeroed.narrow(0, on_device ? 2 : 0, V).clamp_min(1));  // the counts only
  at::Tensor result;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gather_scatter", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr bool kDirect = std::is_same_v<scalar_t, acc_t>;  // float, double: no separate sum
    const auto acc_options = x.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
    at::Tensor acc = zeros_async({V, F}, acc_options);
    if (scatter) {
      const int vec = vector_width(x, F / H);
      const int lanes_log2 = row_lanes_log2(F, vec);
      const int64_t blocks = ((E << lanes_log2) + kGatherScatterThreads - 1) / kGatherScatterThreads;
      const scalar_t* w = weight ? weight->const_data_ptr<scalar_t>() : nullptr;
      const auto launch = [&](auto vec_constant, auto weighted) {
        gather_scatter_kernel<scalar_t, acc_t, decltype(vec_constant)::value, decltype(weighted)::value>
            <<<blocks, kGatherScatterThreads, 0, stream>>>(
                x.const_data_ptr<scalar_t>(), src_ptr, dst_index.const_data_ptr<int64_t>(), w, N, V, E, F, H,
                lanes_log2, acc.mutable_data_ptr<acc_t>(), count_ptr,
                mean ? divisor.mutable_data_ptr<scalar_t>() : nullptr, flags.data);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      const auto with_weight = [&](auto vec_constant) {
        if (w != nullptr) {
          launch(vec_constant, std::true_type{});
        } else {
          launch(vec_constant, std::false_type{});
        }
      };
      if (vec == 4) {
        with_weight(std::integral_constant<int, 4>{});
      } else if (vec == 2) {
        with_weight(std::integral_constant<int, 2>{});
      } else {
        with_weight(std::integral_constant<int, 1>{});
      }
    }
    at::Tensor out = kDirect ? acc : at::empty({V, F}, x.options());
    if (!kDirect && V > 0 && F > 0) {
      const RowsGrid grid = rows_grid(V, F);
      gather_scatter_finish_kernel<scalar_t, acc_t><<<grid.blocks, grid.threads, 0, stream>>>(
          acc.const_data_ptr<acc_t>(), V, F, out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    result = out;
  });
  if (flag_slot == kAtSiteSync) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) {  // a CUDA graph's capture cannot wait: a later call raises
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      site_flags(text(site), N, V);  // raises the flags just raised
    }
  }
  return {result, divisor, flags.tensor};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("gather_scatter", &gather_scatter); }

}  // namespace pyg_fast::cuda
