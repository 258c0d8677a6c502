// One round of label propagation for a set of updating nodes (pyg_fast/transforms/reorder.py).
// Torch-free. The per-node rule (label_propagation_winner) is host + device code: the CPU kernel
// (../../cpu/label_propagation.cpp) includes this header too, so both devices run the same
// arithmetic; the CUDA kernel below (one thread per updating node, the 17 candidates in
// registers) is compiled by nvcc only and launched by ../label_propagation.cu.
//
// The rule reproduces the vectorised torch round it replaced bit for bit, given the same random
// draws (`offset` per updating node, `priority` per label):
//  * candidates: the node's own label, then 16 sampled slots s = 0..15. A node of degree deg
//    samples entry ptr[node] + (spread_s + offset) mod max(deg, 1) of its list, with
//    spread_s = s * deg / 16 when deg > 16, else s; slots s >= deg are not real.
//  * a slot that is not real carries the label of col[0] (the torch code read entry 0 there):
//    it never wins, but it does count for every candidate of that label.
//  * count[c] = how many of the 17 candidates equal candidate c; score = priority[label] +
//    count (float32); the winner is the real candidate of highest score, the first one on ties
//    (torch.argmax). The node's own label always takes part, so a node without neighbours keeps
//    its label.
#pragma once

#include <cstdint>

#include "../../common/reduce.h"  // PF_HOST_DEVICE

// Loops over the 17 candidates unroll on both compilers (the candidates stay in registers).
#if defined(__CUDACC__)
#define PF_LP_UNROLL _Pragma("unroll")
#else
#define PF_LP_UNROLL _Pragma("GCC unroll 17")
#endif

namespace pyg_fast::cuda {

constexpr int kLabelPropagationSamples = 16;
constexpr int kLabelPropagationCandidates = kLabelPropagationSamples + 1;
constexpr int kLabelPropagationThreadsPerBlock = 256;

// Bits of what label_propagation_winner found out of range (the CPU kernel raises, the CUDA
// kernel goes on with what is in range).
enum LabelPropagationError : int {
  kLabelPropagationBadPtr = 1,        // ptr[node] < 0, ptr[node + 1] < ptr[node] or > E
  kLabelPropagationBadNeighbour = 2,  // a sampled col entry outside [0, V): the slot is not real
  kLabelPropagationBadLabel = 4,      // a label outside [0, P): the candidate cannot win
};

// The label the slots that are not real carry: labels[col[0]]. Without a readable col[0] any
// value does: no node then has a real slot to compare it with (a valid ptr gives every node
// degree 0), or the input is already reported as bad.
template <typename index_t>
PF_HOST_DEVICE index_t label_propagation_filler(const index_t* labels, const index_t* col, int64_t V, int64_t E) {
  if (E > 0 && col[0] >= 0 && col[0] < V) return labels[col[0]];
  return index_t(-1);
}

// The label node `node` (in [0, V)) adopts, read from the labels before the round; ORs what it
// found out of range into `error`.
template <typename index_t>
PF_HOST_DEVICE index_t label_propagation_winner(const index_t* __restrict__ labels, const int64_t* __restrict__ ptr,
                                                const index_t* __restrict__ col, const float* __restrict__ priority,
                                                int64_t V, int64_t E, int64_t P, int64_t node, int64_t offset,
                                                index_t filler, int& error) {
  const index_t current = labels[node];
  const int64_t lo = ptr[node], hi = ptr[node + 1];
  if (lo < 0 || hi < lo || hi > E) {
    error |= kLabelPropagationBadPtr;
    return current;
  }
  const int64_t degree = hi - lo;
  const int64_t span = degree > 0 ? degree : 1;
  int64_t rotation = offset % span;  // floor modulo, as torch's %
  if (rotation < 0) rotation += span;

  index_t candidate[kLabelPropagationCandidates];
  bool real[kLabelPropagationCandidates];
  candidate[0] = current;
  real[0] = true;
PF_LP_UNROLL
  for (int s = 0; s < kLabelPropagationSamples; ++s) {
    candidate[s + 1] = filler;
    real[s + 1] = false;
    if (s < degree) {
      const int64_t spread = degree > kLabelPropagationSamples ? s * degree / kLabelPropagationSamples : s;
      int64_t slot = spread + rotation;  // both < span
      if (slot >= span) slot -= span;
      const index_t neighbour = col[lo + slot];
      if (neighbour >= 0 && neighbour < V) {
        candidate[s + 1] = labels[neighbour];
        real[s + 1] = true;
      } else {
        error |= kLabelPropagationBadNeighbour;
      }
    }
  }

  // Slots that are not real score -1 in the torch code and real ones at least 1: they never win.
  float best = -1.0f;
  index_t winner = current;
PF_LP_UNROLL
  for (int c = 0; c < kLabelPropagationCandidates; ++c) {
    if (!real[c]) continue;
    const index_t label = candidate[c];
    if (label < 0 || label >= P) {
      error |= kLabelPropagationBadLabel;
      continue;
    }
    int count = 0;  // candidates of this label, itself included
PF_LP_UNROLL
    for (int d = 0; d < kLabelPropagationCandidates; ++d) count += candidate[d] == label;
    const float score = priority[label] + static_cast<float>(count);
    if (score > best) {  // strictly: the first of equal scores wins
      best = score;
      winner = label;
    }
  }
  return winner;
}

#if defined(__CUDACC__)
// One thread per updating node i: out[nodes[i]] = its winner (out is a copy of labels, so no
// thread reads a label written in this launch); adds the number of nodes whose label changed to
// *changed, one atomic per block. Out-of-range nodes are skipped.
template <typename index_t>
__global__ void __launch_bounds__(kLabelPropagationThreadsPerBlock)
    label_propagation_round_kernel(const index_t* __restrict__ labels, index_t* __restrict__ out,
                                   const int64_t* __restrict__ ptr, const index_t* __restrict__ col,
                                   const int64_t* __restrict__ nodes, const int64_t* __restrict__ offset,
                                   const float* __restrict__ priority, int64_t num_updating, int64_t V, int64_t E,
                                   int64_t P, unsigned long long* __restrict__ changed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int moved = 0;
  if (i < num_updating) {
    const int64_t node = nodes[i];
    if (node >= 0 && node < V) {
      int error = 0;
      const index_t filler = label_propagation_filler(labels, col, V, E);
      const index_t winner =
          label_propagation_winner(labels, ptr, col, priority, V, E, P, node, offset[i], filler, error);
      out[node] = winner;
      moved = winner != labels[node];
    }
  }
  const int block_moved = __syncthreads_count(moved);
  if (threadIdx.x == 0 && block_moved > 0) atomicAdd(changed, static_cast<unsigned long long>(block_moved));
}
#endif

}  // namespace pyg_fast::cuda

#undef PF_LP_UNROLL
