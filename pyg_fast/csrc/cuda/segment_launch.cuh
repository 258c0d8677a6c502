// Launch logic shared by the segment-family CUDA bindings: parsing the schedule config that
// pyg_fast/tuning chose, picking the vector width at compile time and sizing the grid.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <type_traits>

#include "kernels/segment_reduce.cuh"

namespace pyg_fast::cuda {

enum class Schedule : int64_t { Row = 0, Chunk = 1, RowParallel = 2 };

// Layout of the int[] config argument (kept in sync with pyg_fast/tuning/__init__.py):
// [schedule, lanes per group, vector width, threads per block, rows per chunk]; [] = defaults.
struct SegmentConfig {
  Schedule schedule = Schedule::Row;
  int lanes = 32;
  int vec = 1;
  int threads = 256;
  int64_t chunk = 256;

  // `feature_block` must be a multiple of the vector width (a head's size for weighted gathers).
  static SegmentConfig parse(c10::IntArrayRef config, int64_t num_features, int64_t feature_block,
                             int64_t element_size) {
    SegmentConfig c;
    if (config.empty()) {
      c.vec = static_cast<int>(16 / element_size);
      while (c.vec > 1 && (num_features % c.vec || feature_block % c.vec)) c.vec /= 2;
      c.lanes = 1;
      while (c.lanes < 32 && static_cast<int64_t>(c.lanes) * c.vec < num_features) c.lanes *= 2;
      return c;
    }
    TORCH_CHECK_VALUE(config.size() == 5, "pyg_fast: a segment config has 5 entries, got ", config.size());
    c.schedule = static_cast<Schedule>(config[0]);
    c.lanes = static_cast<int>(config[1]);
    c.vec = static_cast<int>(config[2]);
    c.threads = static_cast<int>(config[3]);
    c.chunk = config[4];
    TORCH_CHECK_VALUE(config[0] >= 0 && config[0] <= 2, "pyg_fast: unknown schedule ", config[0]);
    TORCH_CHECK_VALUE(c.lanes >= 1 && c.lanes <= 32 && (c.lanes & (c.lanes - 1)) == 0,
                      "pyg_fast: lanes must be a power of two <= 32, got ", c.lanes);
    TORCH_CHECK_VALUE((c.vec == 1 || c.vec == 2 || c.vec == 4 || c.vec == 8) && c.vec * element_size <= 16 &&
                          num_features % c.vec == 0 && feature_block % c.vec == 0,
                      "pyg_fast: vector width ", c.vec, " does not fit features of size ", num_features);
    TORCH_CHECK_VALUE(c.threads >= 32 && c.threads <= 1024 && c.threads % 32 == 0,
                      "pyg_fast: threads per block must be a multiple of 32 up to 1024, got ", c.threads);
    TORCH_CHECK_VALUE(c.chunk >= 1, "pyg_fast: rows per chunk must be positive, got ", c.chunk);
    return c;
  }

  // Narrows the vector width until every pointer is aligned to a whole vector.
  void align_to(std::initializer_list<const void*> pointers, int64_t element_size) {
    for (const void* p : pointers)
      while (vec > 1 && reinterpret_cast<uintptr_t>(p) % (vec * element_size) != 0) vec /= 2;
  }
};

inline int64_t num_sms() {
  static int count[64] = {};
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (count[device] == 0)
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&count[device], cudaDevAttrMultiProcessorCount, device));
  return count[device];
}

// Enough blocks to cover `items` groups, capped at a few waves (the kernels stride).
inline int64_t grid_for(int64_t items, const SegmentConfig& c) {
  const int64_t groups_per_block = c.threads / c.lanes;
  const int64_t blocks = (items + groups_per_block - 1) / groups_per_block;
  return std::max<int64_t>(1, std::min<int64_t>(blocks, num_sms() * 32));
}

// Calls f(std::integral_constant<int, VEC>) for the runtime vector width (at most 16 bytes).
template <typename scalar_t, typename F>
void dispatch_vec(int vec, const F& f) {
  constexpr int kMax = 16 / static_cast<int>(sizeof(scalar_t));
  switch (vec) {
    case 8: if constexpr (kMax >= 8) return f(std::integral_constant<int, 8>{}); break;
    case 4: if constexpr (kMax >= 4) return f(std::integral_constant<int, 4>{}); break;
    case 2: if constexpr (kMax >= 2) return f(std::integral_constant<int, 2>{}); break;
    default: break;
  }
  f(std::integral_constant<int, 1>{});
}

// Reduces the rows of `rows` into out [B, V, F] with the configured schedule.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
void launch_segment_reduce(const SegmentConfig& c, const at::Tensor& ptr, int64_t num_segments, int64_t batch,
                           const Rows& rows, at::Tensor& out) {
  auto stream = c10::cuda::getCurrentCUDAStream();
  const Groups groups{c.lanes};
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  if (c.schedule == Schedule::Row) {
    segment_rows_kernel<scalar_t, acc_t, R, VEC>
        <<<grid_for(batch * num_segments, c), c.threads, 0, stream>>>(p, num_segments, batch, groups, rows, o);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  if (c.schedule == Schedule::RowParallel) {
    segment_rows_parallel_kernel<scalar_t, acc_t, R, VEC>
        <<<grid_for(batch * num_segments, c), c.threads, 0, stream>>>(p, num_segments, batch, groups, rows, o);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t num_chunks = (rows.num_rows + c.chunk - 1) / c.chunk;
  const at::Tensor carry = at::empty({batch, num_chunks, 2, rows.num_features},
                         out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  acc_t* cp = carry.mutable_data_ptr<acc_t>();
  segment_chunks_kernel<scalar_t, acc_t, R, VEC><<<grid_for(batch * num_chunks, c), c.threads, 0, stream>>>(
      p, num_segments, batch, c.chunk, num_chunks, groups, rows, o, cp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  segment_fixup_kernel<scalar_t, acc_t, R, VEC><<<grid_for(batch * num_segments, c), c.threads, 0, stream>>>(
      p, num_segments, batch, rows.num_features, c.chunk, num_chunks, groups, cp, o);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace pyg_fast::cuda
