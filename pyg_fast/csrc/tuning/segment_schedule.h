// Choice of CUDA schedule and tiling for the segment-reduction family, from sizes alone.
// Torch-free: the table is loaded once from pyg_fast/tuning/rules.json (through the op
// pyg_fast::set_segment_rules) and read by the CUDA bindings for calls that bring no config
// (torch.compile, tracing, a graph seen for the first time) and by Python for reused graphs.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace pyg_fast::tuning {

// Schedule ids, the first entry of a config. Python reads the names from here
// (pyg_fast::segment_schedule_names), so this enum is their one source.
enum class Schedule : int64_t { Row = 0, Chunk = 1, RowParallel = 2, Groups = 3, Balanced = 4, Edges = 5 };
constexpr int kNumSchedules = 6;
const char* schedule_name(Schedule s);

// A config of this one entry asks the CUDA segment ops for the table's choice from the sizes with the
// groups schedule allowed, its neighbour-group layout built by the op for that call: what a traced
// call gets (pyg_fast.tuning.TRACED), where no layout can be kept with the graph from step to step.
constexpr int64_t kChooseWithGroups = -1;

// Output vectors per thread of the balanced schedule (kernels/segment_balanced.cuh reads it).
constexpr int kBalancedTile = 2;

// Skew (longest / mean segment) assumed where the longest segment is unknown: a graph seen for the
// first time, or traced. A row schedule on a skewed graph waits for its longest segment (arxiv_like,
// longest 2427 of mean 6.9, F = 16 gathered: 452 us against 68 grouped, H100), so the guess leans
// high: over the 230 inputs of the held-out zoo sweep, the pick at 256 against the fastest is 1.18x
// (geometric mean; worst 5.1x) with graph-aware schedules and 1.28x (worst 5.0x) without, at 64
// 1.34x (worst 208x) and 1.84x.
constexpr double kUnknownSkew = 256.0;

// What a measured table entry prescribes: the schedule and its limits (0 = GNNAdvisor's model).
struct Params {
  Schedule schedule = Schedule::Row;
  int64_t max_lanes = 8, threads = 128, chunk = 256;
};

// A launch: [schedule, lanes per group, vector width, threads per block, rows per chunk or group],
// the layout of the ops' int[] config argument.
using Config = std::array<int64_t, 5>;

struct Input {
  int64_t num_rows;       // rows reduced, E
  int64_t num_segments;   // V
  int64_t num_features;   // F
  int64_t element_size;   // bytes per value
  bool gather;            // rows gathered through a source index
  int64_t feature_block;  // features per head (F without an edge weight of several heads)
  int64_t max_segment;    // longest segment, -1 where unknown
  bool graph_aware;       // whether a per-graph layout (groups, balanced) may be used
};

// The input's coordinates in the table: (log2 E, log2 E/V, log2 F, element size, gather, log2 skew).
std::array<double, 6> features(const Input& input);

// The index of the measured entry nearest to the input (weighted squared distance over the
// features; the first of equals), -1 for an empty table.
int64_t nearest(const Input& input);

// The configuration of an input: the nearest measured entry's parameters, resolved for its sizes.
// Graph-aware schedules are chosen only where input.graph_aware; chunked ones only where the
// segments cover every row (always, for validated input).
Config choose(const Input& input);

// `params` resolved for an input: vector width from F, lanes from F (or the rows, for row_parallel),
// GNNAdvisor's model where max_lanes or a group's chunk is 0.
Config resolve(const Params& params, const Input& input);

// Loads the measured table: `weights` [6] per feature, `features` [n * 6], `params` [n * 8]
// (the best entry's schedule, max_lanes, threads, chunk, then the best of the schedules that need no
// per-graph layout), `fallback` [4] for an empty table.
void set_rules(const double* weights, const double* features, const int64_t* params, int64_t count,
               const int64_t* fallback);

// Where the table came from and how many entries it has, for explain().
std::string describe_rules();

}  // namespace pyg_fast::tuning
