// CUDA bindings of the per-graph preparation ops; the kernels in kernels/layout.cuh. No host
// synchronisation: sizes come from the caller, errors travel as flags (flag_ring.cuh).
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <tuple>

#include "../ops/layout.h"
#include "flag_ring.cuh"
#include "kernels/layout.cuh"

namespace pyg_fast::cuda {
namespace {

int64_t blocks_for(int64_t n) { return (std::max<int64_t>(n, 1) + kLayoutThreadsPerBlock - 1) / kLayoutThreadsPerBlock; }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> coo_to_csr(const at::Tensor& index, int64_t num_segments,
                                                                      bool is_sorted,
                                                                      const c10::optional<at::Tensor>& src,
                                                                      int64_t src_bound, int64_t flag_slot) {
  check_coo_to_csr_args(index, num_segments, src);
  const c10::cuda::CUDAGuard guard(index.device());
  const int64_t E = index.numel(), V = num_segments;
  const auto opts = index.options();
  auto ptr = at::empty({V + 1}, opts);
  auto perm = at::empty({is_sorted ? 0 : E}, opts);
  auto src_sorted = at::empty({src.has_value() ? E : 0}, opts);
  const FlagBuffer flags = flag_buffer(kLayoutFlags, flag_slot, opts);
  auto stream = at::cuda::getCurrentCUDAStream();
  int64_t* f = flags.data;
  const int64_t* s = src.has_value() ? src->const_data_ptr<int64_t>() : nullptr;
  int64_t* ss = src.has_value() ? src_sorted.mutable_data_ptr<int64_t>() : nullptr;
  const int64_t blocks = blocks_for(std::max(E, V + 1));
  if (is_sorted) {
    coo_finish_kernel<<<blocks, kLayoutThreadsPerBlock, 0, stream>>>(
        IndexKeys{index.const_data_ptr<int64_t>(), V}, index.const_data_ptr<int64_t>(), E, V, nullptr, s, src_bound,
        ptr.mutable_data_ptr<int64_t>(), nullptr, ss, f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {ptr, perm, src_sorted, flags.tensor};
  }
  // Keys and row numbers, then a radix sort over the bits of V only (17 bits for 122 k nodes: 3
  // passes where torch.sort's int64 keys take 8), then the pointer, the row numbers widened and
  // the sources. Stable, so two groupings of one index agree: a counting sort with atomic ranks
  // (49 against 71 us of kernels, arxiv_like, H200) broke a compiled SpMM's weight gradient, which
  // paired one grouping's permutation with another's sources (relative error 0.64). 32-bit row
  // numbers took the whole grouping from 89 to 82 us (arxiv_like, H200).
  auto buf = at::empty({4, E}, opts.dtype(at::kInt));
  auto* keys_in = reinterpret_cast<uint32_t*>(buf.mutable_data_ptr<int32_t>());
  uint32_t* keys_out = keys_in + E;
  uint32_t* rows_in = keys_in + 2 * E;
  uint32_t* rows_out = keys_in + 3 * E;
  if (E > 0) {
    coo_keys_kernel<<<blocks_for(E), kLayoutThreadsPerBlock, 0, stream>>>(index.const_data_ptr<int64_t>(), E, V,
                                                                           keys_in, rows_in, f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int bits = layout_key_bits(V);
    size_t temp_bytes = 0;
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, rows_in, rows_out,
                                                   static_cast<int>(E), 0, bits, stream));
    auto temp = at::empty({static_cast<int64_t>(temp_bytes)}, opts.dtype(at::kByte));
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.mutable_data_ptr(), temp_bytes, keys_in, keys_out, rows_in,
                                                   rows_out, static_cast<int>(E), 0, bits, stream));
  }
  coo_finish_kernel<<<blocks, kLayoutThreadsPerBlock, 0, stream>>>(
      SortedKeys{keys_out}, index.const_data_ptr<int64_t>(), E, V, rows_out, s, src_bound,
      ptr.mutable_data_ptr<int64_t>(), perm.mutable_data_ptr<int64_t>(), ss, f);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {ptr, perm, src_sorted, flags.tensor};
}

at::Tensor csr_to_coo(const at::Tensor& ptr, int64_t num_rows) {
  check_csr_to_coo_args(ptr, num_rows);
  const c10::cuda::CUDAGuard guard(ptr.device());
  auto out = at::empty({num_rows}, ptr.options());
  if (num_rows == 0) return out;
  csr_to_coo_kernel<<<blocks_for(num_rows), kLayoutThreadsPerBlock, 0, at::cuda::getCurrentCUDAStream()>>>(
      ptr.const_data_ptr<int64_t>(), ptr.numel() - 1, num_rows, out.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> looped_csr(const at::Tensor& src, const at::Tensor& ptr,
                                                          const at::Tensor& perm, int64_t num_loops) {
  check_looped_csr_args(src, ptr, perm, num_loops);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t E = src.numel(), V = ptr.numel() - 1;
  auto out_src = at::empty({E + num_loops}, src.options());
  auto out_ptr = at::empty({V + 1}, ptr.options());
  auto out_perm = at::empty({E + num_loops}, perm.options());
  looped_csr_kernel<<<blocks_for(std::max(E, V + 1)), kLayoutThreadsPerBlock, 0, at::cuda::getCurrentCUDAStream()>>>(
      src.const_data_ptr<int64_t>(), ptr.const_data_ptr<int64_t>(), perm.const_data_ptr<int64_t>(), E, V, num_loops,
      out_src.mutable_data_ptr<int64_t>(), out_ptr.mutable_data_ptr<int64_t>(), out_perm.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_src, out_ptr, out_perm};
}

}  // namespace

// Declared in segment_launch.cuh: the segment ops build the table for a traced call.
at::Tensor neighbor_groups_table(const at::Tensor& ptr, int64_t num_rows, int64_t group_size) {
  const int64_t V = ptr.numel() - 1, max_groups = V + num_rows / group_size;
  auto table = at::empty({V + 1 + 2 * max_groups + 1}, ptr.options());
  int64_t* group_ptr = table.mutable_data_ptr<int64_t>();
  auto counts = at::empty({V}, ptr.options());
  auto stream = at::cuda::getCurrentCUDAStream();
  group_counts_kernel<<<blocks_for(V), kLayoutThreadsPerBlock, 0, stream>>>(
      ptr.const_data_ptr<int64_t>(), V, group_size, counts.mutable_data_ptr<int64_t>(), group_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, counts.const_data_ptr<int64_t>(), group_ptr + 1,
                                               V, stream));
  auto temp = at::empty({static_cast<int64_t>(temp_bytes)}, ptr.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.mutable_data_ptr(), temp_bytes, counts.const_data_ptr<int64_t>(),
                                               group_ptr + 1, V, stream));
  group_fill_kernel<<<blocks_for(max_groups + 1), kLayoutThreadsPerBlock, 0, stream>>>(
      ptr.const_data_ptr<int64_t>(), group_ptr, V, group_size, max_groups, group_ptr + V + 1,
      group_ptr + V + 1 + max_groups + 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return table;
}

TORCH_LIBRARY_IMPL(pyg_fast, CUDA, m) {
  m.impl("coo_to_csr", &coo_to_csr);
  m.impl("csr_to_coo", &csr_to_coo);
  m.impl("looped_csr", &looped_csr);
}

}  // namespace pyg_fast::cuda
