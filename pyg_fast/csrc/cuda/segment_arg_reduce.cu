#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "../ops/segment_arg_reduce.h"
#include "kernels/scatter_arg.cuh"  // arg_feature_lanes
#include "kernels/segment_arg_reduce.cuh"

namespace pyg_fast::cuda {
namespace {

// One pass of the row runs, with or without a permutation, kVec features a load.
template <ArgReduce R, ArgRowsPass P, int kVec, typename scalar_t>
void launch_rows(dim3 grid, dim3 block, cudaStream_t stream, const scalar_t* src, const int64_t* ptr,
                 const int64_t* perm, int64_t B, int64_t E, int64_t V, int64_t F, int64_t rows_per_thread,
                 unsigned long long* keys, unsigned long long* arg, scalar_t* out) {
  if (perm) {
    segment_arg_rows_kernel<R, P, true, kVec, scalar_t>
        <<<grid, block, 0, stream>>>(src, ptr, perm, B, E, V, F, rows_per_thread, keys, arg, out);
  } else {
    segment_arg_rows_kernel<R, P, false, kVec, scalar_t>
        <<<grid, block, 0, stream>>>(src, ptr, perm, B, E, V, F, rows_per_thread, keys, arg, out);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct ArgRowsGrid {
  dim3 grid, block;
  int64_t rows_per_thread;
};

// The grid of a pass over [B, E, F] taking vec features a thread. A thread's run is halved (down
// to one unrolled step) while the pass would fill the SMs less than twice: a thread waits out its
// run's loads one unrolled step after the other, and runs of 64 left Cora (10 k rows) three blocks.
ArgRowsGrid rows_grid(int64_t B, int64_t E, int64_t F, int vec) {
  const int64_t groups = F / vec;
  const int lanes = arg_feature_lanes(groups);
  const dim3 block(lanes, kArgRowsThreads / lanes);
  const int64_t feature_blocks = (groups + lanes - 1) / lanes, batches = std::min<int64_t>(B, 65535);
  const int64_t wanted = 2LL * kArgRowsBlocksPerSM * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t shortest = vec == 1 ? kArgRowsUnroll : kArgRowsUnroll / 2;
  int64_t run = kArgRowsPerThread;
  auto blocks = [&](int64_t length) { return (E + block.y * length - 1) / (block.y * length); };
  while (run > shortest && blocks(run) * feature_blocks * batches < wanted) run /= 2;
  return {dim3(static_cast<unsigned>(blocks(run)), static_cast<unsigned>(feature_blocks),
               static_cast<unsigned>(batches)),
          block, run};
}

std::tuple<at::Tensor, at::Tensor> segment_arg_reduce(const at::Tensor& src, const at::Tensor& ptr,
                                                      const std::optional<at::Tensor>& perm,
                                                      c10::string_view reduce) {
  const ArgReduce op = check_segment_arg_reduce_args(src, ptr, perm, reduce);
  const c10::cuda::CUDAGuard guard(src.device());
  auto outputs = segment_arg_reduce_outputs(src, ptr, op);
  at::Tensor &out = std::get<0>(outputs), &arg = std::get<1>(outputs);
  if (out.numel() == 0) return outputs;
  const int64_t B = src.size(0), E = src.size(1), F = src.size(2), V = ptr.numel() - 1;
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t* order = perm.has_value() ? perm->const_data_ptr<int64_t>() : nullptr;
  if (op != ArgReduce::Mul) {
    const at::Tensor keys = at::zeros({B, V, F}, ptr.options());
    auto* key_ptr = reinterpret_cast<unsigned long long*>(keys.mutable_data_ptr<int64_t>());
    auto* arg_ptr = reinterpret_cast<unsigned long long*>(arg.mutable_data_ptr<int64_t>());
    // four features a load where the rows keep 16-byte (or 8-byte) alignment
    const bool vectorized = src.element_size() <= 4 && F % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(src.const_data_ptr()) % (4 * src.element_size()) == 0;
    AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_arg_rows", [&] {
      PF_DISPATCH_ARG_REDUCE(op, [&] {
        if constexpr (R != ArgReduce::Mul) {
          const scalar_t* s = src.const_data_ptr<scalar_t>();
          const int64_t* p = ptr.const_data_ptr<int64_t>();
          scalar_t* o = out.mutable_data_ptr<scalar_t>();
          if constexpr (kArgPacks<scalar_t>) {
            if (E < 0xFFFFFFFFll) {  // the row fits the key's low half beside 0xFFFFFFFF - row > 0
              if (E > 0) {
                const ArgRowsGrid g = rows_grid(B, E, F, vectorized ? 4 : 1);
                if (vectorized) {
                  launch_rows<R, ArgRowsPass::Packed, 4>(g.grid, g.block, stream, s, p, order, B, E, V, F,
                                                         g.rows_per_thread, key_ptr, arg_ptr, o);
                } else {
                  launch_rows<R, ArgRowsPass::Packed, 1>(g.grid, g.block, stream, s, p, order, B, E, V, F,
                                                         g.rows_per_thread, key_ptr, arg_ptr, o);
                }
              }
              const dim3 grid(static_cast<unsigned>(std::min<int64_t>((V * F + 255) / 256, 1 << 20)),
                              static_cast<unsigned>(std::min<int64_t>(B, 65535)));
              segment_arg_rows_unpack_kernel<scalar_t><<<grid, 256, 0, stream>>>(
                  s, key_ptr, B, E, V * F, F, o, arg.mutable_data_ptr<int64_t>());
              C10_CUDA_KERNEL_LAUNCH_CHECK();
              return;
            }
          }
          out.zero_();
          arg.fill_(E);
          if (E > 0) {
            const ArgRowsGrid g = rows_grid(B, E, F, 1);
            launch_rows<R, ArgRowsPass::Keys, 1>(g.grid, g.block, stream, s, p, order, B, E, V, F, g.rows_per_thread,
                                                 key_ptr, arg_ptr, o);
            launch_rows<R, ArgRowsPass::FindRow, 1>(g.grid, g.block, stream, s, p, order, B, E, V, F,
                                                    g.rows_per_thread, key_ptr, arg_ptr, o);
          }
        }
      });
    });
    return outputs;
  }
  const int64_t blocks = std::min<int64_t>((out.numel() + kArgReduceThreads - 1) / kArgReduceThreads, 1 << 20);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_arg_reduce", [&] {
    segment_arg_reduce_kernel<ArgReduce::Mul, scalar_t, at::opmath_type<scalar_t>><<<blocks, kArgReduceThreads, 0,
                                                                                      stream>>>(
        src.const_data_ptr<scalar_t>(), ptr.const_data_ptr<int64_t>(), order, B, E, V, F,
        out.mutable_data_ptr<scalar_t>(), nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("segment_arg_reduce", &segment_arg_reduce); }

}  // namespace pyg_fast::cuda
