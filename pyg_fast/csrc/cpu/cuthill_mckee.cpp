// CPU kernel of cuthill_mckee: one queue-based BFS per community, communities one after
// another (sequential, O(V + E') in all but the sorts of each node's new neighbours; a bad index
// raises instead of being skipped). It sorts each node's new neighbours by (degree, id) itself,
// so the neighbour lists may come in any order.
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../ops/cuthill_mckee.h"

namespace pyg_fast::cpu {
namespace {

// A community whose BFS runs out of roots or places more nodes than it has.
constexpr const char* kInconsistent =
    "pyg_fast: 'roots' must list every node once, community by community, and 'col' must link nodes of one "
    "community only";

at::Tensor cuthill_mckee(const at::Tensor& ptr, const at::Tensor& col, const at::Tensor& roots,
                         const at::Tensor& community_ptr, int64_t max_community_size) {
  check_cuthill_mckee_args(ptr, col, roots, community_ptr);
  const int64_t V = roots.numel(), E = col.numel(), C = community_ptr.numel() - 1;
  auto position = at::full({V}, -1, roots.options());
  const int64_t* p = ptr.const_data_ptr<int64_t>();
  const int64_t* c = col.const_data_ptr<int64_t>();
  const int64_t* r = roots.const_data_ptr<int64_t>();
  const int64_t* cp = community_ptr.const_data_ptr<int64_t>();
  int64_t* pos = position.mutable_data_ptr<int64_t>();
  std::vector<int64_t> queue(V);  // queue[pos[v]] = v

  PF_CHECK_VALUE(cp[0] == 0 && cp[C] == V, "pyg_fast: 'community_ptr' must run from 0 to V = ", V);
  for (int64_t community = 0; community < C; ++community) {
    const int64_t lo = cp[community], hi = cp[community + 1];
    PF_CHECK_VALUE(lo <= hi, "pyg_fast: 'community_ptr' must be non-decreasing");
    if (hi - lo > max_community_size) continue;
    int64_t next = lo, head = lo, scan = lo;
    while (next < hi) {
      if (head == next) {  // the BFS ended: start the next one at the first unvisited root
        while (scan < hi) {
          const int64_t v = r[scan];
          PF_CHECK_INDEX(v >= 0 && v < V, "pyg_fast: 'roots' holds ids outside [0, ", V, ")");
          if (pos[v] < 0) break;
          ++scan;
        }
        PF_CHECK_VALUE(scan < hi, kInconsistent);
        pos[r[scan]] = next;
        queue[next++] = r[scan++];
      }
      const int64_t parent = queue[head++];
      const int64_t begin = p[parent], end = p[parent + 1];
      PF_CHECK_VALUE(begin >= 0 && begin <= end && end <= E, "pyg_fast: 'ptr' must be non-decreasing, start at ",
                     ">= 0 and end at <= ", E, " (the size of 'col')");
      const int64_t first_child = next;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t child = c[j];
        PF_CHECK_INDEX(child >= 0 && child < V, "pyg_fast: 'col' holds ids outside [0, ", V, ")");
        if (pos[child] >= 0) continue;
        PF_CHECK_VALUE(next < hi, kInconsistent);
        pos[child] = next;
        queue[next++] = child;
      }
      // The new children by (degree, id), whatever the order of the list.
      const auto by_degree = [p](int64_t a, int64_t b) {
        const int64_t da = p[a + 1] - p[a], db = p[b + 1] - p[b];
        return da < db || (da == db && a < b);
      };
      std::sort(queue.begin() + first_child, queue.begin() + next, by_degree);
      for (int64_t i = first_child; i < next; ++i) pos[queue[i]] = i;
    }
  }
  return position;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_fast, CPU, m) { m.impl("cuthill_mckee", &cuthill_mckee); }

}  // namespace pyg_fast::cpu
