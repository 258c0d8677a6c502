// CPU kernels of the per-graph preparation ops: a stable counting sort (O(E + V), one pass to
// count and one to place) and the per-element rules of ../cuda/kernels/layout.cuh.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <tuple>
#include <vector>

#include "../cuda/kernels/layout.cuh"
#include "../ops/layout.h"

namespace pyg_fast::cpu {
namespace {

using namespace pyg_fast::cuda;

constexpr int64_t kRowsPerTask = 1 << 14;

// Rows a chunk of the counting sort takes at least. Each chunk counts its rows' keys in V + 1
// counters of its own, so chunks are made only where the rows outnumber those counters (1.17 M rows
// into 169 k segments: 9.2-9.8 ms in one chunk, 6.2-6.5 ms in two on 2 cores).
constexpr int64_t kRowsPerChunk = 1 << 16;

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> coo_to_csr(const at::Tensor& index, int64_t num_segments,
                                                                      bool is_sorted,
                                                                      const c10::optional<at::Tensor>& src,
                                                                      int64_t src_bound, int64_t /*flag_slot*/) {
  check_coo_to_csr_args(index, num_segments, src);
  const int64_t E = index.numel(), V = num_segments;
  const auto opts = index.options();
  auto ptr = at::empty({V + 1}, opts);
  auto perm = at::empty({is_sorted ? 0 : E}, opts);
  auto src_sorted = at::empty({src.has_value() ? E : 0}, opts);
  auto flags = at::zeros({kLayoutFlags}, opts);
  const int64_t* idx = index.const_data_ptr<int64_t>();
  int64_t* p = ptr.mutable_data_ptr<int64_t>();
  int64_t* f = flags.mutable_data_ptr<int64_t>();

  // Chunk c (rows [c * step, (c + 1) * step)) counts its rows of each key k in count[c][k] (invalid
  // rows: key V); its flags go to its own row of chunk_flags.
  const int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>({int64_t{at::get_num_threads()}, E / kRowsPerChunk, E / (V + 1)}));
  const int64_t step = (E + chunks - 1) / chunks;
  std::vector<int64_t> count(chunks * (V + 1), 0);
  std::vector<int64_t> chunk_flags(chunks * kLayoutFlags, 0);
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      int64_t* mine = count.data() + c * (V + 1);
      int64_t* flag = chunk_flags.data() + c * kLayoutFlags;
      for (int64_t e = c * step; e < std::min(E, (c + 1) * step); ++e) {
        const int64_t key = layout_key(idx[e], V);
        if (key == V) flag[kFlagIndexRange] = 1;
        ++mine[key];
        if (is_sorted && e > 0 && idx[e] < idx[e - 1]) flag[kFlagNotSorted] = 1;
      }
    }
  });
  for (int64_t c = 0; c < chunks; ++c)
    for (int k = 0; k < kLayoutFlags; ++k) f[k] |= chunk_flags[c * kLayoutFlags + k];
  // ptr: the running sum of the valid keys' counts; then each chunk's count of a key becomes where
  // its first row of that key goes (after the earlier chunks' rows of the key: a stable sort), the
  // invalid rows after every valid one. Chunk by chunk, so that the counters are read in order.
  std::vector<int64_t> next(V + 1, 0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t k = 0; k < V; ++k) next[k] += count[c * (V + 1) + k];
  p[0] = 0;
  for (int64_t k = 0; k < V; ++k) p[k + 1] = p[k] + next[k];
  std::copy(p, p + V + 1, next.begin());  // next[V] = p[V]: where the invalid rows start
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t k = 0; k <= V; ++k) {
      const int64_t rows = count[c * (V + 1) + k];
      count[c * (V + 1) + k] = next[k];
      next[k] += rows;
    }
  }
  if (!is_sorted) {
    int64_t* out = perm.mutable_data_ptr<int64_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        int64_t* place = count.data() + c * (V + 1);
        for (int64_t e = c * step; e < std::min(E, (c + 1) * step); ++e) out[place[layout_key(idx[e], V)]++] = e;
      }
    });
  }
  if (src.has_value()) {
    const int64_t* s = src->const_data_ptr<int64_t>();
    const int64_t* order = is_sorted ? nullptr : perm.const_data_ptr<int64_t>();
    int64_t* out = src_sorted.mutable_data_ptr<int64_t>();
    std::atomic<bool> bad{false};
    at::parallel_for(0, E, kRowsPerTask, [&](int64_t begin, int64_t end) {
      bool mine = false;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t value = s[order == nullptr ? i : order[i]];
        mine |= src_bound >= 0 && (value < 0 || value >= src_bound);
        out[i] = value;
      }
      if (mine) bad = true;
    });
    if (bad) f[kFlagSrcRange] = 1;
  }
  return {ptr, perm, src_sorted, flags};
}

at::Tensor csr_to_coo(const at::Tensor& ptr, int64_t num_rows) {
  check_csr_to_coo_args(ptr, num_rows);
  auto out = at::empty({num_rows}, ptr.options());
  const int64_t V = ptr.numel() - 1;
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  int64_t* o = out.mutable_data_ptr<int64_t>();
  at::parallel_for(0, num_rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) o[e] = layout_segment_of(p, V, e);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> looped_csr(const at::Tensor& src, const at::Tensor& ptr,
                                                          const at::Tensor& perm, int64_t num_loops) {
  check_looped_csr_args(src, ptr, perm, num_loops);
  const int64_t E = src.numel(), V = ptr.numel() - 1;
  auto out_src = at::empty({E + num_loops}, src.options());
  auto out_ptr = at::empty({V + 1}, ptr.options());
  auto out_perm = at::empty({E + num_loops}, perm.options());
  const int64_t *s = src.const_data_ptr<int64_t>(), *p = ptr.const_data_ptr<int64_t>(),
                *q = perm.const_data_ptr<int64_t>();
  int64_t *os = out_src.mutable_data_ptr<int64_t>(), *op = out_ptr.mutable_data_ptr<int64_t>(),
          *oq = out_perm.mutable_data_ptr<int64_t>();
  for (int64_t v = 0; v <= V; ++v) op[v] = looped_ptr(p, v, num_loops);
  for (int64_t v = 0; v < num_loops; ++v) {
    os[looped_loop(p, v)] = v;
    oq[looped_loop(p, v)] = E + v;
  }
  int64_t d = 0;  // rows in order: walk the segments alongside (invalid rows past ptr[V]: d = V)
  for (int64_t e = 0; e < E; ++e) {
    while (d < V && p[d + 1] <= e) ++d;
    const int64_t at = looped_row(e, d, num_loops);
    os[at] = s[e];
    oq[at] = q[e];
  }
  return {out_src, out_ptr, out_perm};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) {
  m.impl("coo_to_csr", &coo_to_csr);
  m.impl("csr_to_coo", &csr_to_coo);
  m.impl("looped_csr", &looped_csr);
}

}  // namespace pyg_fast::cpu
