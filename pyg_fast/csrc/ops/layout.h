// Schema-level argument checks of the per-graph preparation ops, shared by their CPU and CUDA
// kernels.
#pragma once

#include "../common/check.h"

namespace pyg_fast {

// The sort keys are 32-bit, with one spare segment for invalid values (the CUDA radix sort reads
// half the bytes of int64 keys and sorts only the bits up to V).
constexpr int64_t kLayoutMaxSegments = (int64_t{1} << 31) - 2;

inline void check_coo_to_csr_args(const at::Tensor& index, int64_t num_segments, const c10::optional<at::Tensor>& src) {
  check_index(index, "index");
  PF_CHECK_VALUE(num_segments >= 0 && num_segments <= kLayoutMaxSegments,
                 "pyg_fast: the number of segments must lie in [0, ", kLayoutMaxSegments, "], got ", num_segments);
  PF_CHECK_VALUE(index.numel() < (int64_t{1} << 31), "pyg_fast: at most 2^31 - 1 rows can be grouped, got ",
                 index.numel());
  if (src.has_value()) {
    check_index(*src, "src");
    check_same_device(*src, index, "src", "index");
    PF_CHECK_VALUE(src->numel() == index.numel(), "pyg_fast: 'src' has ", src->numel(), " entries but 'index' has ",
                   index.numel());
  }
}

inline void check_csr_to_coo_args(const at::Tensor& ptr, int64_t num_rows) {
  check_ptr(ptr);
  PF_CHECK_VALUE(num_rows >= 0, "pyg_fast: the number of rows must be non-negative, got ", num_rows);
  PF_CHECK_VALUE(num_rows == 0 || ptr.numel() >= 2, "pyg_fast: ", num_rows, " rows cannot lie in 0 segments");
}

inline void check_looped_csr_args(const at::Tensor& src, const at::Tensor& ptr, const at::Tensor& perm,
                                  int64_t num_loops) {
  check_index(src, "src");
  check_ptr(ptr);
  check_index(perm, "perm");
  check_same_device(ptr, src, "ptr", "src");
  check_same_device(perm, src, "perm", "src");
  PF_CHECK_VALUE(perm.numel() == src.numel(), "pyg_fast: 'perm' has ", perm.numel(), " entries but 'src' has ",
                 src.numel());
  PF_CHECK_VALUE(num_loops >= 0 && num_loops <= ptr.numel() - 1, "pyg_fast: num_loops must lie in [0, ",
                 ptr.numel() - 1, "] (the number of segments), got ", num_loops);
}

}  // namespace pyg_fast
