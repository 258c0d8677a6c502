// Backward kernels of the segment reductions: the spread of sum/mean and the extremum's routing.
// Torch-free.
//
// They run a thread per row and vector of features, each row told its segment by `seg` (from
// row_segments_kernel for a CSR pointer, or a COO index itself), so a segment's rows spread over
// many threads whatever its length. One group of lanes walking each segment's rows took 11 ms for
// the max backward on reddit2_like's 23 M rows at F = 16 (H100), against 0.56 ms for the forward.
#pragma once

#include "segment_common.cuh"
#include "segment_of.cuh"

namespace pyg_fast::cuda {

// Threads per block of the kernels below.
constexpr int kRowThreads = 256;

// The segment of every row e < num_rows of the CSR pointer ptr [V + 1]; -1 for a row outside every
// segment (before ptr[0], or from ptr[V] on). A template: this header is compiled into several files.
template <int = 0>
__global__ void row_segments_kernel(const int64_t* __restrict__ ptr, int64_t num_segments, int64_t num_rows,
                                    int64_t* __restrict__ seg) {
  const int64_t V = num_segments;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < num_rows;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    seg[e] = V == 0 || e < ptr[0] || e >= ptr[V] ? -1 : layout_segment_of(ptr, V, e);
  }
}

// Work item t of batch * num_rows * (F / VEC): batch b, row e, features f0 .. f0 + VEC.
struct RowItem {
  int64_t b, e, f0;
};

template <int VEC>
__device__ __forceinline__ RowItem row_item(int64_t t, int64_t num_rows, int64_t num_features) {
  const int64_t per_row = num_features / VEC, be = t / per_row;
  return {be / num_rows, be % num_rows, (t % per_row) * VEC};
}

// Gradient of sum/mean w.r.t. src [B, E, F]: every row gets its segment's grad_out (divided by the
// segment's length for mean); a row outside every segment gets 0. Every entry is written.
template <typename scalar_t, typename acc_t, Reduce R, int VEC>
__global__ void segment_spread_backward_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ seg,
                                               int64_t num_segments, int64_t batch, int64_t num_rows,
                                               int64_t num_features, const scalar_t* __restrict__ grad_out,
                                               scalar_t* __restrict__ grad_src) {
  const int64_t F = num_features, total = batch * num_rows * (F / VEC);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RowItem it = row_item<VEC>(t, num_rows, F);
    const int64_t r = seg[it.e];
    Vec<scalar_t, VEC> w;
    if (static_cast<uint64_t>(r) < static_cast<uint64_t>(num_segments)) {
      const Vec<scalar_t, VEC> g =
          *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + (it.b * num_segments + r) * F + it.f0);
      const acc_t inv = R == Reduce::Mean ? acc_t(1) / static_cast<acc_t>(ptr[r + 1] - ptr[r]) : acc_t(1);
#pragma unroll
      for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(g.v[k]) * inv);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) w.v[k] = scalar_t(0);
    }
    *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_src + (it.b * num_rows + it.e) * F + it.f0) = w;
  }
}

// Row e's message as the forward pass saw it, rounded to scalar_t like the stored extremum; false
// for a row its source skips.
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
__device__ __forceinline__ bool extremum_message(const Rows& rows, int64_t b, int64_t e, int64_t f0,
                                                 Vec<scalar_t, VEC>& m) {
  Vec<scalar_t, VEC> v;
  if (!rows.load(b, e, f0, v)) return false;
  const acc_t s = rows.template scale<acc_t>(e, f0);
#pragma unroll
  for (int k = 0; k < VEC; ++k) m.v[k] = Rows::kScaled ? static_cast<scalar_t>(s * static_cast<acc_t>(v.v[k])) : v.v[k];
  return true;
}

// Gradient of max/min w.r.t. every row (message), in two passes. This one counts, per segment and
// feature, the rows equal to the stored extremum into ties [B, V, F] (zeroed by the caller): an
// atomic only where a row equals it, once per segment and feature unless values tie.
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
__global__ void extremum_ties_kernel(Rows rows, const int64_t* __restrict__ seg, int64_t num_segments,
                                     int64_t batch, const scalar_t* __restrict__ out, acc_t* __restrict__ ties) {
  const int64_t E = rows.num_rows, F = rows.num_features, total = batch * E * (F / VEC);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RowItem it = row_item<VEC>(t, E, F);
    const int64_t r = seg[it.e];
    Vec<scalar_t, VEC> m;
    if (static_cast<uint64_t>(r) >= static_cast<uint64_t>(num_segments) ||
        !extremum_message<scalar_t, acc_t>(rows, it.b, it.e, it.f0, m))
      continue;
    const int64_t o = (it.b * num_segments + r) * F + it.f0;
    const Vec<scalar_t, VEC> best = *reinterpret_cast<const Vec<scalar_t, VEC>*>(out + o);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k])) atomicAdd(ties + o + k, acc_t(1));
  }
}

// The second pass: grad_rows [B, E, F] gets grad_out split evenly among the rows equal to their
// segment's extremum, 0 elsewhere (rows outside every segment and skipped rows too: every entry is
// written).
template <typename scalar_t, typename acc_t, int VEC, typename Rows>
__global__ void extremum_route_kernel(Rows rows, const int64_t* __restrict__ seg, int64_t num_segments,
                                      int64_t batch, const scalar_t* __restrict__ out,
                                      const scalar_t* __restrict__ grad_out, const acc_t* __restrict__ ties,
                                      scalar_t* __restrict__ grad_rows) {
  const int64_t E = rows.num_rows, F = rows.num_features, total = batch * E * (F / VEC);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RowItem it = row_item<VEC>(t, E, F);
    const int64_t r = seg[it.e];
    Vec<scalar_t, VEC> m, w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.v[k] = scalar_t(0);
    if (static_cast<uint64_t>(r) < static_cast<uint64_t>(num_segments) &&
        extremum_message<scalar_t, acc_t>(rows, it.b, it.e, it.f0, m)) {
      const int64_t o = (it.b * num_segments + r) * F + it.f0;
      const Vec<scalar_t, VEC> best = *reinterpret_cast<const Vec<scalar_t, VEC>*>(out + o);
      const Vec<scalar_t, VEC> g = *reinterpret_cast<const Vec<scalar_t, VEC>*>(grad_out + o);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        if (static_cast<acc_t>(m.v[k]) == static_cast<acc_t>(best.v[k]))
          w.v[k] = static_cast<scalar_t>(static_cast<acc_t>(g.v[k]) / ties[o + k]);
    }
    *reinterpret_cast<Vec<scalar_t, VEC>*>(grad_rows + (it.b * E + it.e) * F + it.f0) = w;
  }
}

}  // namespace pyg_fast::cuda
