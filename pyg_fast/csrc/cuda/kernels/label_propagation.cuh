// One round of label propagation (pyg_fast/transforms/reorder.py). Torch-free. The per-node rule
// (label_propagation_next) is host + device code: the CPU kernel (../../cpu/label_propagation.cpp)
// includes this header too, so both devices run the same arithmetic and draw the same random
// numbers; the CUDA kernel below (one thread per node, the 17 candidates in registers) is
// compiled by nvcc only and launched by ../label_propagation.cu.
//
// Random draws are counter-based (splitmix64's output function over a key per (seed, round,
// stream) plus the node or label id): no generator state and no tensors of draws, so a round is
// one launch and both devices give the same labels for a seed. Round r of seed s:
//  * node v updates iff bit 63 of draw(key(s, 0, kHalf), v) equals r % 2 (two random halves that
//    update in turn), else it keeps its label;
//  * candidates: v's own label, then 16 sampled slots k = 0..15. A node of degree deg samples
//    entry ptr[v] + (spread_k + rotation) mod max(deg, 1) of its list, with spread_k = k * deg / 16
//    when deg > 16, else k, and rotation = draw(key(s, r, kOffset), v) mod max(deg, 1); slots
//    k >= deg are not real.
//  * a slot that is not real carries the label of col[0] (a quirk of the first, vectorised
//    version that the selector's constants were fitted with): it never wins, but it does count
//    for every candidate of that label.
//  * count[c] = how many of the 17 candidates equal candidate c; the winner is the real
//    candidate of highest (count, priority of its label), the first one on ties, where a label's
//    priority is the top 32 bits of draw(key(s, r, kPriority), label): one random label order per
//    round. The node's own label always takes part, so a node without neighbours keeps its label.
#pragma once

#include <cstdint>

#include "../../common/random.h"

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

// Bits of what label_propagation_next found out of range (the CPU kernel raises, the CUDA
// kernel goes on with what is in range).
enum LabelPropagationError : int {
  kLabelPropagationBadPtr = 1,        // ptr[node] < 0, ptr[node + 1] < ptr[node] or > E
  kLabelPropagationBadNeighbour = 2,  // a sampled col entry outside [0, V): the slot is not real
};

// Independent streams of draws within a round.
enum LabelPropagationStream : uint64_t { kLabelPropagationHalf = 0, kLabelPropagationOffset = 1,
                                         kLabelPropagationPriority = 2 };

PF_HOST_DEVICE uint64_t label_propagation_key(int64_t seed, int64_t round, uint64_t stream) {
  const uint64_t counter = static_cast<uint64_t>(round) * 4u + stream + 1u;
  return mix64(mix64(static_cast<uint64_t>(seed)) + counter * kGolden);
}

// The keys of one round, computed once per thread.
struct LabelPropagationDraws {
  uint64_t half, offset, priority;
  uint64_t parity;  // nodes whose half bit equals it update

  PF_HOST_DEVICE LabelPropagationDraws(int64_t seed, int64_t round)
      : half(label_propagation_key(seed, 0, kLabelPropagationHalf)),
        offset(label_propagation_key(seed, round, kLabelPropagationOffset)),
        priority(label_propagation_key(seed, round, kLabelPropagationPriority)),
        parity(static_cast<uint64_t>(round) & 1u) {}
};

// The label the slots that are not real carry: labels[col[0]]. Without a readable col[0] any
// value does: no node then has a real slot to compare it with (a valid ptr gives every node
// degree 0), or the input is already reported as bad.
template <typename index_t>
PF_HOST_DEVICE index_t label_propagation_filler(const index_t* labels, const index_t* col, int64_t V, int64_t E) {
  if (E > 0 && col[0] >= 0 && col[0] < V) return labels[col[0]];
  return index_t(-1);
}

// The label node `node` (in [0, V)) holds after the round, read from the labels before it; ORs
// what it found out of range into `error`.
template <typename index_t>
PF_HOST_DEVICE index_t label_propagation_next(const index_t* __restrict__ labels, const int64_t* __restrict__ ptr,
                                              const index_t* __restrict__ col, int64_t V, int64_t E, int64_t node,
                                              index_t filler, const LabelPropagationDraws& draws, int& error) {
  const index_t current = labels[node];
  if ((draw64(draws.half, node) >> 63) != draws.parity) return current;
  const int64_t lo = ptr[node], hi = ptr[node + 1];
  if (lo < 0 || hi < lo || hi > E) {
    error |= kLabelPropagationBadPtr;
    return current;
  }
  const int64_t degree = hi - lo;
  const uint64_t span = degree > 0 ? static_cast<uint64_t>(degree) : 1u;
  const int64_t rotation = static_cast<int64_t>(draw64(draws.offset, node) % span);

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
      if (slot >= degree) slot -= degree;
      const index_t neighbour = col[lo + slot];
      if (neighbour >= 0 && neighbour < V) {
        candidate[s + 1] = labels[neighbour];
        real[s + 1] = true;
      } else {
        error |= kLabelPropagationBadNeighbour;
      }
    }
  }

  // Score (count, priority) in one integer: count in the high bits, so it decides first.
  uint64_t best = 0;
  index_t winner = current;
PF_LP_UNROLL
  for (int c = 0; c < kLabelPropagationCandidates; ++c) {
    if (!real[c]) continue;
    const index_t label = candidate[c];
    uint64_t count = 0;  // candidates of this label, itself included (>= 1: every score beats 0)
PF_LP_UNROLL
    for (int d = 0; d < kLabelPropagationCandidates; ++d) count += candidate[d] == label;
    const uint64_t score = (count << 32) | (draw64(draws.priority, label) >> 32);
    if (score > best) {  // strictly: the first of equal scores wins
      best = score;
      winner = label;
    }
  }
  return winner;
}

#if defined(__CUDACC__)
// One thread per node v: out[v] = its label after the round (labels is not written, so every
// thread reads the labels before the round); adds the number of nodes whose label changed to
// *changed, one atomic per block.
template <typename index_t>
__global__ void __launch_bounds__(kLabelPropagationThreadsPerBlock)
    label_propagation_round_kernel(const index_t* __restrict__ labels, index_t* __restrict__ out,
                                   const int64_t* __restrict__ ptr, const index_t* __restrict__ col, int64_t V,
                                   int64_t E, int64_t seed, int64_t round, unsigned long long* __restrict__ changed) {
  const int64_t node = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int moved = 0;
  if (node < V) {
    int error = 0;
    const LabelPropagationDraws draws(seed, round);
    const index_t next =
        label_propagation_next(labels, ptr, col, V, E, node, label_propagation_filler(labels, col, V, E), draws, error);
    out[node] = next;
    moved = next != labels[node];
  }
  const int block_moved = __syncthreads_count(moved);
  if (threadIdx.x == 0 && block_moved > 0) atomicAdd(changed, static_cast<unsigned long long>(block_moved));
}
#endif

}  // namespace pyg_fast::cuda

#undef PF_LP_UNROLL
