// CUDA binding of the edge softmax; kernels in kernels/edge_softmax.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <type_traits>

#include "../ops/edge_softmax.h"
#include "coo_launch.cuh"
#include "flag_ring.cuh"
#include "kernels/edge_softmax.cuh"

namespace pyg_fast::cuda {
namespace {

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

// Lanes per row: enough to cover the mean row (E * H / V values) with one round of kUnroll
// loads per lane, at least H (a power of two), at most a warp. Measured on the H100 (cora,
// pubmed, arxiv_like, reddit2_like, 1-8 heads, every lane count): within 28% of the best lane
// count everywhere, where one value per lane (the earlier rule) was up to 91% slower on
// arxiv_like (short rows sharing a warp leave fewer lanes idle at the rows' ends).
int lanes_per_row(int64_t E, int64_t H, int64_t V) {
  const int64_t mean_values = blocks_for(E * H, V);
  int lanes = 1;
  while (lanes < 32 && (lanes < H || lanes * kUnroll < mean_values)) lanes *= 2;
  return lanes;
}

// Runs one policy (forward or backward) over all rows of ptr with `lanes` lanes per short row
// (0: lanes_per_row's choice).
template <typename Policy>
void launch_rows(const Policy& p, const at::Tensor& ptr, int64_t E, int64_t H, int64_t lanes) {
  const int64_t V = ptr.numel() - 1;
  const int64_t* ptr_data = ptr.const_data_ptr<int64_t>();
  auto stream = at::cuda::getCurrentCUDAStream();
  if (H > 32) {
    edge_softmax_thread_kernel<<<blocks_for(V * H, kSoftmaxThreadsPerBlock), kSoftmaxThreadsPerBlock, 0, stream>>>(
        p, ptr_data, V, E, H);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int heads = static_cast<int>(H);
  auto rows = [&](auto lanes_tag) {
    constexpr int LANES = decltype(lanes_tag)::value;
    const int64_t short_blocks = blocks_for(V, kSoftmaxWarpsPerBlock * (32 / LANES));
    // Long-row blocks only where a row can be too long for a group: a second scan of ptr costs.
    const int64_t long_blocks = E * H > short_row_values(LANES) ? blocks_for(V, kSoftmaxThreadsPerBlock) : 0;
    edge_softmax_rows_kernel<LANES><<<short_blocks + long_blocks, kSoftmaxThreadsPerBlock, 0, stream>>>(
        p, ptr_data, V, E, heads, short_blocks);
  };
  switch (lanes > 0 ? lanes : lanes_per_row(E, H, V)) {
    case 1: rows(std::integral_constant<int, 1>{}); break;
    case 2: rows(std::integral_constant<int, 2>{}); break;
    case 4: rows(std::integral_constant<int, 4>{}); break;
    case 8: rows(std::integral_constant<int, 8>{}); break;
    case 16: rows(std::integral_constant<int, 16>{}); break;
    default: rows(std::integral_constant<int, 32>{}); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor edge_softmax(const at::Tensor& src, const at::Tensor& ptr, int64_t lanes) {
  check_edge_softmax_args(src, ptr, lanes);
  const c10::cuda::CUDAGuard guard(src.device());
  auto out = at::empty_like(src);
  const int64_t E = src.size(0), H = src.size(1), V = ptr.numel() - 1;
  if (V == 0 || E == 0 || H == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "edge_softmax_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    launch_rows(SoftmaxForward<scalar_t, acc_t>{src.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>()},
                ptr, E, H, lanes);
  });
  return out;
}

at::Tensor edge_softmax_backward(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& ptr,
                                 int64_t lanes) {
  check_edge_softmax_backward_args(out, grad_out, ptr, lanes);
  const c10::cuda::CUDAGuard guard(out.device());
  auto grad_src = at::empty_like(out);
  const int64_t E = out.size(0), H = out.size(1), V = ptr.numel() - 1;
  if (V == 0 || E == 0 || H == 0) return grad_src;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "edge_softmax_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    launch_rows(SoftmaxBackward<scalar_t, acc_t>{out.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(),
                                                 grad_src.mutable_data_ptr<scalar_t>()},
                ptr, E, H, lanes);
  });
  return grad_src;
}

std::tuple<at::Tensor, at::Tensor> edge_softmax_coo(const at::Tensor& src, const at::Tensor& index, int64_t num_nodes,
                                                    int64_t flag_slot) {
  check_edge_softmax_coo_args(src, index, num_nodes);
  const c10::cuda::CUDAGuard guard(src.device());
  auto out = at::empty_like(src);
  const FlagBuffer flags = flag_buffer(1, flag_slot, index.options());
  const int64_t E = src.size(0), H = src.size(1), V = num_nodes, n = E * H;
  if (n == 0) return {out, flags.tensor};
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "edge_softmax_coo_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto acc = src.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
    auto max = at::full({std::max<int64_t>(V, 1), H}, -std::numeric_limits<acc_t>::infinity(), acc);
    auto sum = zeros_async({std::max<int64_t>(V, 1), H}, acc);
    auto pass = [&](auto pass_tag) {
      edge_softmax_coo_kernel<scalar_t, acc_t, decltype(pass_tag)::value><<<coo_blocks(n), kCooThreads, 0, stream>>>(
          src.const_data_ptr<scalar_t>(), index.const_data_ptr<int64_t>(), n, static_cast<int>(H), V,
          max.mutable_data_ptr<acc_t>(), sum.mutable_data_ptr<acc_t>(), out.mutable_data_ptr<scalar_t>(),
          flags.data);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    pass(std::integral_constant<CooPass, CooPass::Max>{});
    pass(std::integral_constant<CooPass, CooPass::Sum>{});
    pass(std::integral_constant<CooPass, CooPass::Write>{});
  });
  return {out, flags.tensor};
}

at::Tensor edge_softmax_coo_backward(const at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& index,
                                     int64_t num_nodes) {
  check_edge_softmax_coo_backward_args(out, grad_out, index, num_nodes);
  const c10::cuda::CUDAGuard guard(out.device());
  auto grad_src = at::empty_like(out);
  const int64_t E = out.size(0), H = out.size(1), V = num_nodes, n = E * H;
  if (n == 0) return grad_src;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "edge_softmax_coo_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    auto dot = zeros_async({std::max<int64_t>(V, 1), H}, out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const scalar_t *y = out.const_data_ptr<scalar_t>(), *g = grad_out.const_data_ptr<scalar_t>();
    const int64_t* d = index.const_data_ptr<int64_t>();
    edge_softmax_coo_backward_kernel<scalar_t, acc_t, false><<<coo_blocks(n), kCooThreads, 0, stream>>>(
        y, g, d, n, static_cast<int>(H), V, dot.mutable_data_ptr<acc_t>(), nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    edge_softmax_coo_backward_kernel<scalar_t, acc_t, true><<<coo_blocks(n), kCooThreads, 0, stream>>>(
        y, g, d, n, static_cast<int>(H), V, dot.mutable_data_ptr<acc_t>(), grad_src.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return grad_src;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("edge_softmax", &edge_softmax);
  m.impl("edge_softmax_backward", &edge_softmax_backward);
  m.impl("edge_softmax_coo", &edge_softmax_coo);
  m.impl("edge_softmax_coo_backward", &edge_softmax_coo_backward);
}

}  // namespace pyg_fast::cuda
