// CUDA binding of sddmm; kernels in kernels/sddmm.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../ops/sddmm.h"
#include "flag_ring.cuh"
#include "kernels/sddmm.cuh"

namespace pyg_fast::cuda {
namespace {

// Resident blocks per SM that a grid-stride launch needs to fill the GPU.
constexpr int64_t kBlocksPerSm = 8;

int64_t grid_size(int64_t work_items, int64_t items_per_block) {
  const int64_t needed = (work_items + items_per_block - 1) / items_per_block;
  const int64_t resident = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * kBlocksPerSm;
  return std::max<int64_t>(1, std::min(needed, resident));
}

// Widest vector (16 bytes at most) that divides the row length and keeps every row aligned.
template <typename scalar_t>
int vector_width(int64_t row_len, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  int vec = 16 / static_cast<int>(sizeof(scalar_t));
  auto aligned = [&](int v) {
    const auto bytes = static_cast<uintptr_t>(v * sizeof(scalar_t));
    return reinterpret_cast<uintptr_t>(a.const_data_ptr()) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(b.const_data_ptr()) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(out.const_data_ptr()) % bytes == 0;
  };
  while (vec > 1 && (row_len % vec != 0 || !aligned(vec))) vec /= 2;
  return vec;
}

// Dot kernel geometry, measured on the H100 (arxiv_like, reddit2_like and two power-law graphs
// of the zoo, D = 16..128): 4 rows of a in flight per group (8 was slower on 14 of 16 cases;
// whole-warp groups at D = 128 gain from 4 over 2: reddit2_like 2.93 vs 3.15 ms), and edges per
// group few enough to fill the GPU (at most 16: reddit2_like D = 16 0.53 ms vs 0.68 ms with 64).
constexpr int kSddmmUnroll = 4;
constexpr int64_t kSddmmMaxChunk = 16;

// Rows of a given edges in flight per group for VEC-wide loads: kSddmmUnroll of 16-byte vectors,
// half as many of the 32-byte ones (the same bytes in flight; four kept the int32 kernel at 64
// registers with 76 bytes of spills, two at 56 with none).
template <typename scalar_t, int VEC>
constexpr int dot_unroll() {
  return VEC * sizeof(scalar_t) > 16 ? kSddmmUnroll * 16 / static_cast<int>(VEC * sizeof(scalar_t)) : kSddmmUnroll;
}

// Resident blocks of a kernel per SM (its registers decide): the dot grid is one wave of them,
// grid-striding; eight a SM regardless left a partial third wave (ncu: up to a third of the time).
template <typename Kernel>
int64_t blocks_per_sm(Kernel kernel) {
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kSddmmThreadsPerBlock, 0));
  return std::max(1, blocks);
}

template <typename scalar_t, typename index_t, typename edge_t, int LANES, int VEC>
void launch_dot_with(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index, const at::Tensor& b_index,
                     at::Tensor& out, int64_t* flags, cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kUnroll = dot_unroll<scalar_t, VEC>();
  const auto kernel = sddmm_dot_kernel<scalar_t, acc_t, index_t, edge_t, LANES, VEC, kUnroll>;
  constexpr int64_t kGroupsPerBlock = kSddmmThreadsPerBlock / LANES;
  static const int64_t per_sm = blocks_per_sm(kernel);  // one instantiation, one kernel
  const int64_t E = a_index.numel(), H = a.size(1);
  const int64_t blocks = per_sm * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t per_group = (E * H + blocks * kGroupsPerBlock - 1) / (blocks * kGroupsPerBlock);
  const int64_t chunk =
      std::clamp<int64_t>((per_group + kUnroll - 1) / kUnroll * kUnroll, kUnroll, kSddmmMaxChunk);
  const int64_t items = (E + chunk - 1) / chunk * H;
  const int64_t grid = std::max<int64_t>(1, std::min(blocks, (items + kGroupsPerBlock - 1) / kGroupsPerBlock));
  kernel<<<grid, kSddmmThreadsPerBlock, 0, stream>>>(
      a.const_data_ptr<scalar_t>(), b.const_data_ptr<scalar_t>(), a_index.const_data_ptr<edge_t>(),
      b_index.const_data_ptr<edge_t>(), out.mutable_data_ptr<scalar_t>(), static_cast<index_t>(E),
      static_cast<index_t>(H), static_cast<index_t>(a.size(2)), static_cast<index_t>(a.size(0)),
      static_cast<index_t>(b.size(0)), static_cast<index_t>(chunk), flags);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// int32 counters where every count and offset the kernel forms fits: E * H plus one grid's worth
// of items past the end, and the elements of a and b.
bool fits_int32(int64_t E, int64_t H, const at::Tensor& a, const at::Tensor& b) {
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max() / 2;
  return E * H < kLimit && a.numel() < kLimit && b.numel() < kLimit;
}

template <typename scalar_t, int VEC>
void launch_dot(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index, const at::Tensor& b_index,
                at::Tensor& out, int64_t* flags, cudaStream_t stream) {
  const int64_t E = a_index.numel(), H = a.size(1), D = a.size(2);
  int lanes = 1;  // adaptive: enough lanes to cover D in one pass of VEC-wide loads, at most a warp
  while (lanes < 32 && static_cast<int64_t>(lanes) * VEC < D) lanes *= 2;
  const bool narrow = fits_int32(E, H, a, b);
  // Counters (index_t) and edge indices (edge_t) are typed apart: int32 edge indices of a graph
  // beyond 2^30 elements are read as they are, with int64 counters, not widened on every call
  const bool int32_edges = a_index.scalar_type() == at::kInt;
  auto launch = [&](auto lanes_tag) {
    constexpr int LANES = decltype(lanes_tag)::value;
    if (int32_edges && narrow) {
      launch_dot_with<scalar_t, int32_t, int32_t, LANES, VEC>(a, b, a_index, b_index, out, flags, stream);
    } else if (int32_edges) {
      launch_dot_with<scalar_t, int64_t, int32_t, LANES, VEC>(a, b, a_index, b_index, out, flags, stream);
    } else if (narrow) {
      launch_dot_with<scalar_t, int32_t, int64_t, LANES, VEC>(a, b, a_index, b_index, out, flags, stream);
    } else {
      launch_dot_with<scalar_t, int64_t, int64_t, LANES, VEC>(a, b, a_index, b_index, out, flags, stream);
    }
  };
  switch (lanes) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 16: launch(std::integral_constant<int, 16>{}); break;
    default: launch(std::integral_constant<int, 32>{}); break;
  }
}

template <typename scalar_t, int VEC>
void launch_elementwise(EdgeOp op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index,
                        const at::Tensor& b_index, at::Tensor& out, int64_t* flags, cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t E = a_index.numel(), F = a.size(1) * a.size(2);
  const int64_t grid = grid_size(E * (F / VEC), kSddmmThreadsPerBlock);
  auto launch = [&](auto op_tag) {
    constexpr SddmmOp OP = decltype(op_tag)::value;
    sddmm_elementwise_kernel<scalar_t, acc_t, OP, VEC><<<grid, kSddmmThreadsPerBlock, 0, stream>>>(
        a.const_data_ptr<scalar_t>(), b.const_data_ptr<scalar_t>(), a_index.const_data_ptr<int64_t>(),
        b_index.const_data_ptr<int64_t>(), out.mutable_data_ptr<scalar_t>(), E, F, a.size(0), b.size(0), flags);
  };
  switch (op) {
    case EdgeOp::Add: launch(std::integral_constant<SddmmOp, SddmmOp::Add>{}); break;
    case EdgeOp::Sub: launch(std::integral_constant<SddmmOp, SddmmOp::Sub>{}); break;
    case EdgeOp::Mul: launch(std::integral_constant<SddmmOp, SddmmOp::Mul>{}); break;
    default: launch(std::integral_constant<SddmmOp, SddmmOp::Div>{}); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor sddmm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_index, const at::Tensor& b_index,
                 c10::string_view op_name, int64_t flag_slot) {
  check_sddmm_args(a, b, a_index, b_index, /*int32_index=*/true);
  const EdgeOp op = parse_edge_op(std::string(op_name));
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t E = a_index.numel(), H = a.size(1), D = a.size(2);
  auto out = op == EdgeOp::Dot ? at::empty({E, H}, a.options()) : at::empty({E, H, D}, a.options());
  // A slot is handed out only where the kernels run (the caller checks the indices otherwise).
  PF_CHECK_VALUE(flag_slot < 0 || (E > 0 && H > 0 && D > 0), "pyg_fast: sddmm got flag_slot ", flag_slot,
                 " for a call that launches no kernel (E = ", E, ", H = ", H, ", D = ", D, ")");
  if (E == 0 || H == 0) return out;
  if (D == 0) return out.zero_();
  int64_t* flags = flag_slot_data(2, flag_slot);
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "sddmm_cuda", [&] {
    constexpr int kMaxVec = 16 / sizeof(scalar_t);
    const bool wide = vector_width<scalar_t>(op == EdgeOp::Dot ? D : H * D, a, b, out) == kMaxVec;
    if (op == EdgeOp::Dot) {
      // Rows past one 16-byte pass of a warp (D > 128 floats): 32-byte vectors a lane, so that one
      // pass covers up to 256 floats and a lane keeps its slice of b's row while consecutive edges
      // share it (a destination's edges), where two passes reloaded it for every edge: D = 256
      // 4-5% faster on six zoo graphs (H200).
      const bool doubled = wide && D > 32 * kMaxVec && D % (2 * kMaxVec) == 0 &&
                           reinterpret_cast<uintptr_t>(a.const_data_ptr()) % 32 == 0 &&
                           reinterpret_cast<uintptr_t>(b.const_data_ptr()) % 32 == 0;
      if (doubled) {
        launch_dot<scalar_t, 2 * kMaxVec>(a, b, a_index, b_index, out, flags, stream);
      } else if (wide) {
        launch_dot<scalar_t, kMaxVec>(a, b, a_index, b_index, out, flags, stream);
      } else {
        launch_dot<scalar_t, 1>(a, b, a_index, b_index, out, flags, stream);
      }
    } else {  // int32 indices read as int64: the elementwise ops move D values an edge, not one
      const at::Tensor ai = a_index.to(at::kLong), bi = b_index.to(at::kLong);
      wide ? launch_elementwise<scalar_t, kMaxVec>(op, a, b, ai, bi, out, flags, stream)
           : launch_elementwise<scalar_t, 1>(op, a, b, ai, bi, out, flags, stream);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) { m.impl("sddmm", &sddmm); }

}  // namespace pyg_fast::cuda
