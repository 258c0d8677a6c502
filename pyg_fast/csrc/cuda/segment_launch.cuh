// Launch logic shared by the segment-family CUDA bindings: parsing the schedule config that
// pyg_fast/tuning chose, picking the vector width at compile time and sizing the grid.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "../common/check.h"
#include "kernels/segment_reduce.cuh"

namespace pyg_fast::cuda {

using tuning::Schedule;

// Rows from which a traced call may take the groups schedule (SegmentConfig::resolve): below it the
// three launches that build the layout would be a large share of the call. A guess, not timed:
// compiled steps were timed at 10 k rows (cora, below) and at 1.2 M and 23 M rows.
constexpr int64_t kGroupsMinRows = int64_t{1} << 16;

// Layout of the int[] config argument (tuning::Config): [schedule, lanes per group, vector width,
// threads per block, rows per chunk (chunk, edges) or per neighbour group (groups; the layout holds
// the groups, this only names it)]. An empty config means "choose from the sizes" (tuning::choose
// without a per-graph layout): what torch.compile, traces and graphs seen once get.
struct SegmentConfig {
  Schedule schedule = Schedule::Row;
  int lanes = 32;
  int vec = 1;
  int threads = 256;
  int64_t chunk = 256;
  bool builds_groups = false;  // the groups schedule with its layout built by the op (kChooseWithGroups)

  // The widest 16-byte-or-less vector that divides the features and `feature_block`: the backward
  // kernels (a thread per row and vector, kernels/segment_backward.cuh) read only `vec`.
  static SegmentConfig plain(int64_t num_features, int64_t feature_block, int64_t element_size) {
    SegmentConfig c;
    c.vec = static_cast<int>(16 / element_size);
    while (c.vec > 1 && (num_features % c.vec || feature_block % c.vec)) c.vec /= 2;
    return c;
  }

  // The forward launch of an input: `config` as given, or the table's choice for its sizes ([]: among
  // the schedules that need no layout; [kChooseWithGroups]: the groups schedule too, from
  // kGroupsMinRows rows).
  static SegmentConfig resolve(c10::IntArrayRef config, const tuning::Input& input) {
    const bool with_groups = config.size() == 1 && config[0] == tuning::kChooseWithGroups;
    if (config.empty() || with_groups) {
      tuning::Input in = input;
      in.graph_aware = with_groups && input.num_rows >= kGroupsMinRows;
      tuning::Config chosen = tuning::choose(in);
      if (static_cast<Schedule>(chosen[0]) == Schedule::Balanced) {  // its row order needs a sort: not per call
        in.graph_aware = false;
        chosen = tuning::choose(in);
      }
      SegmentConfig c = parse(chosen, input.num_features, input.feature_block, input.element_size);
      c.builds_groups = c.schedule == Schedule::Groups;
      return c;
    }
    return parse(config, input.num_features, input.feature_block, input.element_size);
  }

  // `feature_block` must be a multiple of the vector width (a head's size for weighted gathers).
  static SegmentConfig parse(c10::IntArrayRef config, int64_t num_features, int64_t feature_block,
                             int64_t element_size) {
    SegmentConfig c;
    PF_CHECK_VALUE(config.size() == 5, "pyg_fast: a segment config has 5 entries, got ", config.size());
    c.schedule = static_cast<Schedule>(config[0]);
    c.lanes = static_cast<int>(config[1]);
    c.vec = static_cast<int>(config[2]);
    c.threads = static_cast<int>(config[3]);
    c.chunk = config[4];
    PF_CHECK_VALUE(config[0] >= 0 && config[0] <= 5, "pyg_fast: unknown schedule ", config[0]);
    PF_CHECK_VALUE(c.lanes >= 1 && c.lanes <= 32 && (c.lanes & (c.lanes - 1)) == 0,
                      "pyg_fast: lanes must be a power of two <= 32, got ", c.lanes);
    PF_CHECK_VALUE((c.vec == 1 || c.vec == 2 || c.vec == 4 || c.vec == 8) && c.vec * element_size <= 16 &&
                          num_features % c.vec == 0 && feature_block % c.vec == 0,
                      "pyg_fast: vector width ", c.vec, " does not fit features of size ", num_features);
    PF_CHECK_VALUE(c.threads >= 32 && c.threads <= 1024 && c.threads % 32 == 0,
                      "pyg_fast: threads per block must be a multiple of 32 up to 1024, got ", c.threads);
    PF_CHECK_VALUE(c.schedule != Schedule::Edges || c.threads <= kEdgesMaxThreads,
                   "pyg_fast: the edges schedule runs at most ", kEdgesMaxThreads, " threads per block, got ",
                   c.threads);
    PF_CHECK_VALUE(c.chunk >= 1 || (c.schedule != Schedule::Chunk && c.schedule != Schedule::Groups &&
                                    c.schedule != Schedule::Edges),
                   "pyg_fast: rows per chunk (or group) must be positive, got ", c.chunk);
    return c;
  }

  // Narrows the vector width until every pointer is aligned to a whole vector.
  void align_to(std::initializer_list<const void*> pointers, int64_t element_size) {
    for (const void* p : pointers)
      while (vec > 1 && reinterpret_cast<uintptr_t>(p) % (vec * element_size) != 0) vec /= 2;
  }
};

// The per-graph layout that the groups and balanced schedules read (built and cached by
// pyg_fast/ops/_layout.py, passed as the op's `schedule_data`), checked against the config:
//  * groups: [group_ptr (V + 1), group_start (G + 1), group_segment (G)], G >= V neighbour groups
//    (an empty segment has one group of no rows: its kernel writes every segment);
//  * balanced: row_order (V), the segments by decreasing length.
struct GraphLayout {
  const int64_t* group_ptr = nullptr;
  const int64_t* group_start = nullptr;
  const int64_t* group_segment = nullptr;
  int64_t num_groups = 0;
  const int64_t* row_order = nullptr;

  static GraphLayout parse(const SegmentConfig& c, const std::optional<at::Tensor>& data, int64_t num_segments,
                           const at::Tensor& like) {
    GraphLayout layout;
    if (c.schedule != Schedule::Groups && c.schedule != Schedule::Balanced) return layout;
    PF_CHECK_VALUE(data.has_value(), "pyg_fast: the ", c.schedule == Schedule::Groups ? "groups" : "balanced",
                      " schedule needs 'schedule_data' (pyg_fast.tuning builds it)");
    PF_CHECK_TYPE(data->scalar_type() == at::kLong, "pyg_fast: 'schedule_data' must be int64, got ",
                     data->scalar_type());
    PF_CHECK_VALUE(data->dim() == 1 && data->is_contiguous(), "pyg_fast: 'schedule_data' must be 1-D and contiguous");
    PF_CHECK_VALUE(data->device() == like.device(), "pyg_fast: 'schedule_data' is on ", data->device(),
                      " but the values are on ", like.device());
    const int64_t n = data->numel(), V = num_segments;
    const int64_t* p = data->const_data_ptr<int64_t>();
    if (c.schedule == Schedule::Balanced) {
      PF_CHECK_VALUE(n == V, "pyg_fast: the balanced schedule's 'schedule_data' holds one entry per segment (",
                        V, "), got ", n);
      layout.row_order = p;
      return layout;
    }
    PF_CHECK_VALUE(n >= V + 2 && (n - V - 2) % 2 == 0 && (n - V - 2) / 2 >= V,
                   "pyg_fast: the groups schedule's 'schedule_data' must hold V + 1 + 2 G + 1 entries, at least "
                   "one group per segment (empty ones too), for V = ", V, " segments, got ", n);
    layout.num_groups = (n - V - 2) / 2;
    layout.group_ptr = p;
    layout.group_start = p + V + 1;
    layout.group_segment = p + V + 1 + layout.num_groups + 1;
    return layout;
  }
};

// The groups schedule's layout for the segments of `ptr` over `num_rows` rows, built on the device
// for one call (cuda/layout.cu): the table GraphLayout::parse reads, padded to V + num_rows /
// group_size groups, a bound of the true count that follows from the sizes, so that nothing waits
// for the device. The padding groups cover no rows and belong to no segment.
at::Tensor neighbor_groups_table(const at::Tensor& ptr, int64_t num_rows, int64_t group_size);

// The layout of a launch: `data` as given, or the groups table built for this call where `c` asks
// for it (kept alive by `built` until the launch is queued).
inline GraphLayout launch_layout(const SegmentConfig& c, const std::optional<at::Tensor>& data, const at::Tensor& ptr,
                                 int64_t num_rows, const at::Tensor& like, at::Tensor& built) {
  const int64_t V = ptr.numel() - 1;
  if (!c.builds_groups || data.has_value()) return GraphLayout::parse(c, data, V, like);
  built = neighbor_groups_table(ptr, num_rows, c.chunk);
  return GraphLayout::parse(c, built, V, like);
}

inline int64_t num_sms() {
  static int count[64] = {};
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (count[device] == 0)
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&count[device], cudaDevAttrMultiProcessorCount, device));
  return count[device];
}

// Zeroed arrival counters of the groups schedule, at least `count`, one set per stream: kernels on a
// stream run in order and each leaves its counters zeroed, so the next reuses them without a memset,
// while kernels on different streams never share a set. Under graph capture a fresh zeroed set is
// made (the capture records its memset) and not kept.
inline at::Tensor arrival_counters(int64_t count, const at::Tensor& like, cudaStream_t stream) {
  const auto options = like.options().dtype(at::kInt);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return at::zeros({count}, options);
  static std::mutex mutex;
  // Never destroyed: CUDA tensors must not be freed after the allocator at exit.
  static auto* sets = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& set = (*sets)[{like.get_device(), stream}];
  if (!set.defined() || set.numel() < count)
    set = at::zeros({std::max<int64_t>(count, set.defined() ? 2 * set.numel() : 0)}, options);
  return set;
}

// Enough blocks to cover `items` work items at `per_block` a block, capped at a few waves (the
// kernels stride).
inline int64_t grid_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return std::max<int64_t>(1, std::min<int64_t>(blocks, num_sms() * 32));
}

// The same for one group of c.lanes threads per item.
inline int64_t grid_for(int64_t items, const SegmentConfig& c) { return grid_for(items, c.threads / c.lanes); }

// The features one block of the row schedule covers (a multiple of lanes * vec): all of them, unless
// the (batch, segment) groups are too few to fill the GPU, then a share, the slices spread over
// blockIdx.y. Unsplit, the 20 segments of HGB DBLP's paper -> venue relation (14 k rows of 4231
// features) took 30 ms on an H100, 20 warps walking 1.8 k rows each.
inline int64_t row_feature_slice(int64_t groups, const SegmentConfig& c, int64_t num_features, int vec) {
  const int64_t tile = static_cast<int64_t>(c.lanes) * vec;
  const int64_t tiles = std::max<int64_t>(1, (num_features + tile - 1) / tile);
  const int64_t resident = num_sms() * (2048 / c.lanes);  // groups an H100 holds at once: 2048 threads an SM
  const int64_t slices = std::min<int64_t>({tiles, std::max<int64_t>(1, resident / std::max<int64_t>(groups, 1)),
                                            65535});
  return (tiles + slices - 1) / slices * tile;
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

// Partials [B, count, 2, F] of the segments that cross chunks (or blocks), in acc_t.
template <typename acc_t>
at::Tensor carry_buffer(int64_t batch, int64_t count, int64_t num_features, const at::Tensor& out) {
  return at::empty({batch, count, 2, num_features}, out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
}

// The segment of every row of `ptr` over `num_rows` rows, -1 outside every segment: what the
// backward kernels (kernels/segment_backward.cuh) read a row's segment from.
inline at::Tensor row_segments(const at::Tensor& ptr, int64_t num_rows) {
  auto seg = at::empty({num_rows}, ptr.options());
  if (num_rows == 0) return seg;
  row_segments_kernel<><<<grid_for(num_rows, kRowThreads), kRowThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      ptr.const_data_ptr<int64_t>(), ptr.numel() - 1, num_rows, seg.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return seg;
}

// The gradient of a max/min reduction w.r.t. its rows into grad_rows [B, E, F] (every entry
// written): rows `rows` of the segments `seg` (row_segments, or a COO index: values outside [0,
// V) skipped), the stored extremum `out` [B, V, F] and `grad_out` of its shape, both contiguous.
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
void launch_extremum_backward(const Rows& rows, const at::Tensor& seg, int64_t num_segments, int64_t batch,
                              const at::Tensor& out, const at::Tensor& grad_out, at::Tensor& grad_rows) {
  const at::Tensor ties = at::zeros({batch, num_segments, rows.num_features},
                                    out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  const int64_t grid = grid_for(batch * rows.num_rows * (rows.num_features / VEC), kRowThreads);
  auto stream = c10::cuda::getCurrentCUDAStream();
  extremum_ties_kernel<scalar_t, acc_t, VEC><<<grid, kRowThreads, 0, stream>>>(
      rows, seg.const_data_ptr<int64_t>(), num_segments, batch, out.const_data_ptr<scalar_t>(),
      ties.mutable_data_ptr<acc_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  extremum_route_kernel<scalar_t, acc_t, VEC><<<grid, kRowThreads, 0, stream>>>(
      rows, seg.const_data_ptr<int64_t>(), num_segments, batch, out.const_data_ptr<scalar_t>(),
      grad_out.const_data_ptr<scalar_t>(), ties.const_data_ptr<acc_t>(), grad_rows.mutable_data_ptr<scalar_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The chunk and edges schedules: one pass over chunks of rows, then the fixup pass over the segments
// combines the ones that cross chunks and writes the empty ones.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
void launch_chunked(const SegmentConfig& c, const at::Tensor& ptr, int64_t num_segments, int64_t batch,
                    const Rows& rows, at::Tensor& out) {
  auto stream = c10::cuda::getCurrentCUDAStream();
  const Groups groups{c.lanes};
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  const int64_t num_chunks = (rows.num_rows + c.chunk - 1) / c.chunk;
  const at::Tensor carry = carry_buffer<acc_t>(batch, num_chunks, rows.num_features, out);
  acc_t* cp = carry.mutable_data_ptr<acc_t>();
  if (c.schedule == Schedule::Edges) {  // a warp per chunk
    segment_edges_kernel<scalar_t, acc_t, R, VEC>
        <<<grid_for(batch * num_chunks, c.threads / kWarpSize), c.threads, 0, stream>>>(
            p, num_segments, batch, c.chunk, num_chunks, c.lanes, rows, o, cp);
  } else {
    segment_chunks_kernel<scalar_t, acc_t, R, VEC><<<grid_for(batch * num_chunks, c), c.threads, 0, stream>>>(
        p, num_segments, batch, c.chunk, num_chunks, groups, rows, o, cp);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  segment_fixup_kernel<scalar_t, acc_t, R, VEC><<<grid_for(batch * num_segments, c), c.threads, 0, stream>>>(
      p, rows.num_rows, num_segments, batch, rows.num_features, c.chunk, num_chunks, groups, cp, o);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The neighbour-group schedule, in one launch: every segment has a group (GraphLayout::parse checked
// G >= V).
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
void launch_groups(const SegmentConfig& c, const GraphLayout& layout, const at::Tensor& ptr, int64_t num_segments,
                   int64_t batch, const Rows& rows, at::Tensor& out) {
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t per_block = c.threads / c.lanes;
  const int64_t num_blocks = (layout.num_groups + per_block - 1) / per_block;
  const at::Tensor carry = carry_buffer<acc_t>(batch, num_blocks, rows.num_features, out);
  const at::Tensor arrivals = arrival_counters(num_blocks, out, stream);
  const dim3 grid(static_cast<unsigned>(num_blocks), static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  segment_groups_kernel<scalar_t, acc_t, R, VEC><<<grid, c.threads, c.threads * VEC * sizeof(acc_t), stream>>>(
      ptr.const_data_ptr<int64_t>(), layout.group_ptr, layout.group_start, layout.group_segment, num_segments,
      layout.num_groups, batch, c.lanes, rows, out.mutable_data_ptr<scalar_t>(), carry.mutable_data_ptr<acc_t>(),
      reinterpret_cast<unsigned*>(arrivals.mutable_data_ptr<int32_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Reduces the rows of `rows` into out [B, V, F] with the configured schedule.
template <typename scalar_t, typename acc_t, Reduce R, int VEC, typename Rows>
void launch_segment_reduce(const SegmentConfig& c, const GraphLayout& layout, const at::Tensor& ptr,
                               int64_t num_segments, int64_t batch, const Rows& rows, at::Tensor& out) {
  auto stream = c10::cuda::getCurrentCUDAStream();
  const Groups groups{c.lanes};
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  switch (c.schedule) {
    case Schedule::Row: {
      const int64_t slice = row_feature_slice(batch * num_segments, c, rows.num_features, VEC);
      const dim3 grid(static_cast<unsigned>(grid_for(batch * num_segments, c)),
                      static_cast<unsigned>((rows.num_features + slice - 1) / slice));
      segment_rows_kernel<scalar_t, acc_t, R, VEC>
          <<<grid, c.threads, 0, stream>>>(p, num_segments, batch, groups, rows, slice, o);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    case Schedule::RowParallel:
      segment_rows_parallel_kernel<scalar_t, acc_t, R, VEC>
          <<<grid_for(batch * num_segments, c), c.threads, 0, stream>>>(p, num_segments, batch, groups, rows, o);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    case Schedule::Balanced: {
      segment_balanced_kernel<scalar_t, acc_t, R, VEC>
          <<<grid_for(batch * num_segments, c.threads / kWarpSize), c.threads, 0, stream>>>(
          p, layout.row_order, num_segments, batch, c.lanes, rows, o);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    case Schedule::Groups:
      launch_groups<scalar_t, acc_t, R, VEC>(c, layout, ptr, num_segments, batch, rows, out);
      return;
    case Schedule::Chunk:
    case Schedule::Edges:
      launch_chunked<scalar_t, acc_t, R, VEC>(c, ptr, num_segments, batch, rows, out);
      return;
  }
}

}  // namespace pyg_fast::cuda
