// CUDA kernels of the segment reduction family (segment_reduce, index_segment_reduce, SpMM).
// Torch-free: the bindings in ../segment_reduce.cu and ../index_segment_reduce.cu launch them.
//
// Output row r of batch b reduces the rows e in [ptr[r], ptr[r+1]) of a row source (`Rows`):
// the rows of src itself, or rows of x gathered through src_index and scaled by an edge weight.
// Threads form groups of `lanes` threads; each lane owns VEC consecutive features (one 16-byte
// load when VEC * sizeof(scalar_t) == 16), so a group covers lanes * VEC features per pass.
//
// Five schedules (chosen per input by pyg_fast/tuning); the last two read a per-graph layout:
//  * row:   one group per output row walks the whole segment (GeoT's sequential reduction
//           without atomics). Every output row is written exactly once, deterministic.
//  * row_parallel: one group per output row, but its lanes split the segment's rows (lane l
//           takes rows lo + l, lo + l + lanes, ...) and each lane holds VEC features; a
//           warp-shuffle tree combines the lanes (GeoT's parallel reduction). For small F,
//           where lanes over features would leave most of a warp idle or uncoalesced.
//  * chunk: one group per chunk of `chunk` consecutive rows of the source, whatever segments they
//           belong to, so long segments are split evenly (GeoT's work balance). Segments inside a
//           chunk are finished in place; a segment that crosses a chunk boundary leaves one
//           partial per chunk in a carry buffer, and segment_fixup_kernel combines those partials
//           (and writes the empty segments). Deterministic as well: no atomics.
//  * groups: GNNAdvisor's neighbour groups, see segment_groups_kernel.
//  * balanced: G-Sparse's degree-sorted rows with staged indices, see segment_balanced_kernel.
//  * edges: one warp per chunk of rows, lanes over consecutive rows (not features), for small F;
//           see segment_edges_kernel.
#pragma once

#include "segment_common.cuh"
#include "segment_row.cuh"
#include "segment_chunk.cuh"
#include "segment_edges.cuh"
#include "segment_groups.cuh"
#include "segment_balanced.cuh"
#include "segment_backward.cuh"
