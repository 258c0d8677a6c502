// CUDA kernels of the sampled dense-dense edge ops (sddmm). Torch-free: ../sddmm.cu launches them.
//
// a [Na, H, D], b [Nb, H, D]; edge e joins row a_index[e] of a with row b_index[e] of b.
//  * dot: one group of LANES threads per run of consecutive edges of one head; each lane loads
//    VEC consecutive features at a time (16-byte loads where D allows, 32-byte ones where a warp's
//    16-byte loads do not cover D) and the group sums its partial dot products with an
//    xor-shuffle tree of log2(LANES) steps. LANES is adapted to D
//    (the smallest power of two with LANES * VEC >= D, at most 32: G-Sparse's adaptive warp
//    shuffle), so small D packs several groups into one warp instead of idling lanes.
//  * add/sub/mul/div: one thread per VEC consecutive outputs of [E, H * D].
// Out-of-range indices produce zeros and, where `flags` is given, raise flags[0] (a_index) or
// flags[1] (b_index).
#pragma once

#include <cstdint>

namespace pyg_fast::cuda {

enum class SddmmOp : int { Dot = 0, Add = 1, Sub = 2, Mul = 3, Div = 4 };

constexpr int kSddmmThreadsPerBlock = 256;

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) SddmmVec {
  T v[VEC];
};

template <SddmmOp OP, typename acc_t>
__device__ __forceinline__ acc_t sddmm_apply(acc_t x, acc_t y) {
  if constexpr (OP == SddmmOp::Add) return x + y;
  if constexpr (OP == SddmmOp::Sub) return x - y;
  if constexpr (OP == SddmmOp::Div) return x / y;
  return x * y;  // Mul, and the products summed by Dot
}

__device__ __forceinline__ bool in_range(int64_t i, int64_t n) {
  return static_cast<uint64_t>(i) < static_cast<uint64_t>(n);
}

// Whether edge (i, j) is in range; raises the flag of each end that is not, where flags are given.
__device__ __forceinline__ bool edge_in_range(int64_t i, int64_t j, int64_t num_a, int64_t num_b,
                                              int64_t* flags) {
  const bool a_ok = in_range(i, num_a), b_ok = in_range(j, num_b);
  if (flags != nullptr) {
    if (!a_ok) flags[0] = 1;
    if (!b_ok) flags[1] = 1;
  }
  return a_ok && b_ok;
}

// Sums each of the UNROLL values v over the LANES lanes of a group, one xor-shuffle tree per value;
// every lane ends with every total.
template <int LANES, int UNROLL, typename acc_t>
__device__ __forceinline__ void reduce_all(acc_t (&v)[UNROLL]) {
#pragma unroll
  for (int off = LANES / 2; off > 0; off >>= 1) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] += __shfl_xor_sync(0xffffffffu, v[u], off, LANES);
  }
}

// out [E, H]. A group of LANES lanes takes `chunk` consecutive edges of one head (items are
// (chunk, head), heads fastest, so neighbouring groups read neighbouring heads of a row). It walks
// them UNROLL edges at a time, all their rows of a in flight at once. Edges are usually sorted by
// b_index (destination), so consecutive edges share b's row: a lane keeps its slice of the last
// row of b in registers (when D fits one pass of LANES * VEC) and reloads it only when the row
// changes. The UNROLL partial dots are then summed over the group.
// index_t counts edges, items and element offsets: int32 where they fit (the launcher checks),
// which took the kernel from 80 to 63 registers and 3 to 4 resident blocks (H100, arxiv_like
// D = 64: 0.126 -> 0.089 ms with the launcher's grid). Offsets too: widening only them to 64 bits
// cost 6-25% (0.110 vs 0.096 ms there, cold L2). edge_t: the type of the edge index arrays; int32
// copies of a reused graph's halve the index bytes (D = 64: arxiv_like 98 -> 78 us, reddit2_like
// 1.40 -> 1.10 ms, H200). Four resident blocks are asked for with int32 index_t: int64 edge
// arrays (a new graph's) otherwise take the kernel past 64 registers and down to 3 blocks
// (arxiv_like D = 64, fresh: 122 -> 105 us; reused unchanged at 84, H200).
template <typename scalar_t, typename acc_t, typename index_t, typename edge_t, int LANES, int VEC, int UNROLL>
__global__ void __launch_bounds__(kSddmmThreadsPerBlock, sizeof(index_t) == 4 ? 4 : 1)
    sddmm_dot_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                     const edge_t* __restrict__ a_index, const edge_t* __restrict__ b_index,
                     scalar_t* __restrict__ out, index_t num_edges, index_t heads, index_t dim, index_t num_a,
                     index_t num_b, index_t chunk, int64_t* __restrict__ flags) {
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "LANES: power of two <= 32");
  using Vector = SddmmVec<scalar_t, VEC>;
  const int lane = threadIdx.x % LANES;
  const index_t items = (num_edges + chunk - 1) / chunk * heads;
  const index_t groups_per_grid = static_cast<index_t>(gridDim.x) * (blockDim.x / LANES);
  const index_t pass = static_cast<index_t>(LANES) * VEC;
  const bool one_pass = dim <= pass;  // b's slice fits one vector per lane: keep it
  // Every group of a warp runs the same iterations (items rounded up per warp, edges up to the
  // chunk), so the shuffles always see the full warp.
  const index_t warp_first =
      static_cast<index_t>(blockIdx.x) * (blockDim.x / LANES) + threadIdx.x / 32 * (32 / LANES);
  for (index_t base = warp_first; base < items; base += groups_per_grid) {
    const index_t item = base + (threadIdx.x % 32) / LANES;
    index_t run = item, h = 0;
    if (heads != 1) {
      run = item / heads;
      h = item - run * heads;
    }
    const index_t e_lo = item < items ? run * chunk : num_edges;
    const index_t e_hi = min(e_lo + chunk, num_edges);
    index_t cached_j = -1;  // the row of b whose slice vb holds (one pass only)
    Vector vb;
    for (index_t k = 0; k < chunk; k += UNROLL) {
      const scalar_t* row_a[UNROLL];  // null where the edge is past the run or out of range
      index_t j[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const index_t e = e_lo + k + u;
        const int64_t i = e < e_hi ? static_cast<int64_t>(a_index[e]) : 0;
        const int64_t jj = e < e_hi ? static_cast<int64_t>(b_index[e]) : 0;
        const bool ok = e < e_hi && edge_in_range(i, jj, num_a, num_b, flags);
        j[u] = ok ? static_cast<index_t>(jj) : index_t(-1);
        row_a[u] = ok ? a + (static_cast<index_t>(i) * heads + h) * dim : nullptr;
      }
      acc_t dot[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) dot[u] = acc_t(0);
      for (index_t d = static_cast<index_t>(lane) * VEC; d < dim; d += pass) {
        Vector va[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
          if (row_a[u]) va[u] = *reinterpret_cast<const Vector*>(row_a[u] + d);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          if (!row_a[u]) continue;
          if (!one_pass || j[u] != cached_j) {
            vb = *reinterpret_cast<const Vector*>(b + (j[u] * heads + h) * dim + d);
            cached_j = one_pass ? j[u] : index_t(-1);
          }
#pragma unroll
          for (int v = 0; v < VEC; ++v) dot[u] += static_cast<acc_t>(va[u].v[v]) * static_cast<acc_t>(vb.v[v]);
        }
      }
      // An invalid edge's dot stayed 0 on every lane, so totals are written as they are.
      reduce_all<LANES, UNROLL>(dot);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const index_t e = e_lo + k + u;
        if (lane == u % LANES && e < e_hi) out[e * heads + h] = static_cast<scalar_t>(dot[u]);
      }
    }
  }
}

// out [E, H * D] = a[a_index[e]] OP b[b_index[e]] elementwise; features = H * D, VEC divides it.
template <typename scalar_t, typename acc_t, SddmmOp OP, int VEC>
__global__ void sddmm_elementwise_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                         const int64_t* __restrict__ a_index,
                                         const int64_t* __restrict__ b_index, scalar_t* __restrict__ out,
                                         int64_t num_edges, int64_t features, int64_t num_a, int64_t num_b,
                                         int64_t* __restrict__ flags) {
  const int64_t vecs_per_row = features / VEC;
  const int64_t total = num_edges * vecs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t e = t / vecs_per_row, f = (t % vecs_per_row) * VEC;
    const int64_t i = a_index[e], j = b_index[e];
    SddmmVec<scalar_t, VEC> r;
    if (edge_in_range(i, j, num_a, num_b, flags)) {
      const auto va = *reinterpret_cast<const SddmmVec<scalar_t, VEC>*>(a + i * features + f);
      const auto vb = *reinterpret_cast<const SddmmVec<scalar_t, VEC>*>(b + j * features + f);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        r.v[k] = static_cast<scalar_t>(
            sddmm_apply<OP, acc_t>(static_cast<acc_t>(va.v[k]), static_cast<acc_t>(vb.v[k])));
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) r.v[k] = scalar_t(0);
    }
    *reinterpret_cast<SddmmVec<scalar_t, VEC>*>(out + e * features + f) = r;
  }
}

}  // namespace pyg_fast::cuda
