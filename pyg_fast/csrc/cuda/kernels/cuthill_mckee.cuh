// Per-community Cuthill-McKee order on the GPU (pyg_fast/transforms/reorder.py). Torch-free;
// launched by ../cuthill_mckee.cu.
//
// One warp per community runs the community's BFS one parent at a time, as the sequential
// algorithm does: the 32 lanes read 32 consecutive entries of the parent's neighbour list
// (sorted by (degree, id), so a repeated neighbour sits next to itself), a ballot claims the
// unvisited ones and their ranks in the ballot give their positions, in list order. The queue is
// the community's range of `queue`, so a community needs no other memory, and no two warps
// touch the same node (neighbour lists stay inside a community), hence no atomics. A warp walks
// a community in O(its nodes + its entries / 32) dependent steps, so large communities are left
// to the caller (max_community_size).
//
// Memory-safe for any input: out-of-range ids are skipped, and a community never writes
// positions outside its own range (inconsistent input gives an unspecified order, not a crash).
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

constexpr int kCuthillMcKeeWarpsPerBlock = 4;

#if defined(__CUDACC__)
// position [V] must hold -1 on entry (visited = position >= 0); queue [V] is scratch.
__global__ void __launch_bounds__(kCuthillMcKeeWarpsPerBlock * 32)
    cuthill_mckee_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ col,
                         const int64_t* __restrict__ roots, const int64_t* __restrict__ community_ptr, int64_t V,
                         int64_t E, int64_t C, int64_t max_community_size, int64_t* position, int64_t* queue) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kCuthillMcKeeWarpsPerBlock;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kCuthillMcKeeWarpsPerBlock + threadIdx.x / 32; c < C;
       c += warps) {
    const int64_t lo = community_ptr[c], hi = community_ptr[c + 1];
    if (lo < 0 || hi < lo || hi > V || hi - lo > max_community_size) continue;
    int64_t next = lo, head = lo, scan = lo;  // queue[lo, next) is filled, queue[head] is the next parent
    while (next < hi) {
      if (head == next) {  // the BFS ended: start the next one at the first unvisited root
        int64_t root = -1;
        while (scan < hi) {
          const int64_t i = scan + lane;
          const int64_t v = i < hi ? roots[i] : -1;
          const unsigned fresh = __ballot_sync(kAll, v >= 0 && v < V && position[v] < 0);
          if (fresh != 0u) {
            const int first = __ffs(fresh) - 1;
            root = __shfl_sync(kAll, v, first);
            scan += first + 1;
            break;
          }
          scan += 32;
        }
        if (root < 0) break;  // roots lists fewer of the community's nodes than it has
        if (lane == 0) {
          position[root] = next;
          queue[next] = root;
        }
        ++next;
        __syncwarp();  // the root's position and queue entry are visible to every lane
      }
      const int64_t parent = queue[head++];
      const int64_t begin = ptr[parent], end = ptr[parent + 1];
      if (begin < 0 || end < begin || end > E) continue;
      for (int64_t j = begin; j < end && next < hi; j += 32) {
        const int64_t i = j + lane;
        const int64_t child = i < end ? col[i] : -1;
        const int64_t previous = __shfl_up_sync(kAll, child, 1);
        // The first copy of a repeated neighbour claims it; a copy in an earlier round of 32
        // finds it visited.
        const bool claim = child >= 0 && child < V && position[child] < 0 && (lane == 0 || previous != child);
        const unsigned claims = __ballot_sync(kAll, claim);
        const int64_t at = next + __popc(claims & lanes_below);
        if (claim && at < hi) {
          position[child] = at;
          queue[at] = child;
        }
        next += __popc(claims);
        __syncwarp();  // this round's claims are visible before the next round reads position
      }
    }
  }
}
#endif

}  // namespace pyg_fast::cuda
