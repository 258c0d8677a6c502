#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <atomic>

#include "../ops/index_range.h"

namespace pyg_fast::cpu {
namespace {

constexpr int64_t kValuesPerTask = 1 << 16;

at::Tensor index_range_flags(at::TensorList indices, c10::IntArrayRef sizes, int64_t /*flag_slot*/) {
  check_index_range_args(indices, sizes);
  const int64_t count = static_cast<int64_t>(indices.size());
  auto flags = at::zeros({count}, indices[0].options());
  int64_t* out = flags.mutable_data_ptr<int64_t>();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t* values = indices[k].const_data_ptr<int64_t>();
    const auto size = static_cast<uint64_t>(sizes[k]);
    std::atomic<bool> bad{false};
    at::parallel_for(0, indices[k].numel(), kValuesPerTask, [&](int64_t begin, int64_t end) {
      bool found = false;  // a negative value wraps past every size
      for (int64_t i = begin; i < end; ++i) found |= static_cast<uint64_t>(values[i]) >= size;
      if (found) bad = true;
    });
    out[k] = bad ? 1 : 0;
  }
  return flags;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("index_range_flags", &index_range_flags); }

}  // namespace pyg_fast::cpu
