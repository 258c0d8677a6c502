// Nearest-neighbour schedule selection over the measured table (see segment_schedule.h) and the
// ops that expose it to Python: set_segment_rules, segment_schedule, segment_schedule_entry,
// segment_schedule_names.
#include "segment_schedule.h"

#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "../common/check.h"

namespace pyg_fast::tuning {
namespace {

constexpr int kFeatures = 6;

struct Entry {
  std::array<double, kFeatures> features;
  Params best, layout_free;
};

struct Rules {
  std::array<double, kFeatures> weights{};
  std::vector<Entry> table;
  Params fallback;
};

std::shared_mutex rules_mutex;
Rules& rules() {
  static Rules r;
  return r;
}

Params params_at(const int64_t* p) {
  PF_CHECK_VALUE(p[0] >= 0 && p[0] < kNumSchedules, "pyg_fast: unknown schedule id ", p[0], " in the rules");
  return Params{static_cast<Schedule>(p[0]), p[1], p[2], p[3]};
}

double log2_at_least_1(double v) { return std::log2(std::max(v, 1.0)); }

// The power of two nearest to value (in log scale), clamped to [lo, hi].
int64_t pow2_near(double value, int64_t lo, int64_t hi) {
  const double p = std::exp2(std::round(std::log2(std::max(value, 1.0))));
  return std::min<int64_t>(hi, std::max<int64_t>(lo, static_cast<int64_t>(p)));
}

// Widest vector (at most 16 bytes) whose length divides the feature size and the feature block.
int64_t vector_width(int64_t num_features, int64_t element_size, int64_t feature_block) {
  int64_t vec = std::max<int64_t>(1, 16 / element_size);
  while (vec > 1 && (num_features % vec || feature_block % vec)) vec /= 2;
  return vec;
}

bool is_chunked(Schedule s) { return s == Schedule::Chunk || s == Schedule::Edges; }
bool is_graph_aware(Schedule s) { return s == Schedule::Groups || s == Schedule::Balanced; }

}  // namespace

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::Row: return "row";
    case Schedule::Chunk: return "chunk";
    case Schedule::RowParallel: return "row_parallel";
    case Schedule::Groups: return "groups";
    case Schedule::Balanced: return "balanced";
    case Schedule::Edges: return "edges";
  }
  return "unknown";
}

void set_rules(const double* weights, const double* features, const int64_t* params, int64_t count,
               const int64_t* fallback) {
  Rules r;
  std::copy(weights, weights + kFeatures, r.weights.begin());
  r.table.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    std::copy(features + i * kFeatures, features + (i + 1) * kFeatures, r.table[i].features.begin());
    r.table[i].best = params_at(params + i * 8);
    r.table[i].layout_free = params_at(params + i * 8 + 4);
    PF_CHECK_VALUE(!is_graph_aware(r.table[i].layout_free.schedule),
                   "pyg_fast: a rules entry's layout-free choice names a graph-aware schedule");
  }
  r.fallback = params_at(fallback);
  std::unique_lock lock(rules_mutex);
  rules() = std::move(r);
}

std::string describe_rules() {
  std::shared_lock lock(rules_mutex);
  return std::to_string(rules().table.size()) + " measured entries";
}

std::array<double, 6> features(const Input& in) {
  const double E = static_cast<double>(std::max<int64_t>(in.num_rows, 1));
  const double mean_segment = E / static_cast<double>(std::max<int64_t>(in.num_segments, 1));
  const double skew = in.max_segment < 0 ? kUnknownSkew
                                         : static_cast<double>(std::max<int64_t>(in.max_segment, 1)) / mean_segment;
  return {std::log2(E), std::log2(mean_segment), log2_at_least_1(static_cast<double>(in.num_features)),
          static_cast<double>(in.element_size), in.gather ? 1.0 : 0.0, log2_at_least_1(skew)};
}

namespace {

// nearest() over a table the caller holds the lock of.
int64_t nearest_in(const Rules& r, const Input& in) {
  const std::array<double, kFeatures> feat = features(in);
  int64_t found = -1;
  double best = INFINITY;
  for (size_t i = 0; i < r.table.size(); ++i) {
    double d = 0;
    for (int k = 0; k < kFeatures; ++k)
      d += r.weights[k] * (feat[k] - r.table[i].features[k]) * (feat[k] - r.table[i].features[k]);
    if (d < best) {
      best = d;
      found = static_cast<int64_t>(i);
    }
  }
  return found;
}

}  // namespace

int64_t nearest(const Input& in) {
  std::shared_lock lock(rules_mutex);
  return nearest_in(rules(), in);
}

Config choose(const Input& in) {
  Params p;
  {
    std::shared_lock lock(rules_mutex);
    const Rules& r = rules();
    const int64_t i = nearest_in(r, in);
    p = i < 0 ? r.fallback
              : in.graph_aware || !is_graph_aware(r.table[i].best.schedule) ? r.table[i].best : r.table[i].layout_free;
  }
  if (is_graph_aware(p.schedule) && !in.graph_aware) p.schedule = Schedule::Row;  // the fallback entry
  return resolve(p, in);
}

Config resolve(const Params& p, const Input& in) {
  const Schedule schedule = p.schedule;
  const double mean_segment = static_cast<double>(std::max<int64_t>(in.num_rows, 1)) /
                              static_cast<double>(std::max<int64_t>(in.num_segments, 1));
  const int64_t vec = vector_width(in.num_features, in.element_size, in.feature_block);
  int64_t chunk = p.chunk;
  if (schedule == Schedule::Groups && chunk == 0) chunk = pow2_near(mean_segment, 2, 64);  // GNNAdvisor's group size
  int64_t lanes;
  if (p.max_lanes == 0) {  // GNNAdvisor's dimension workers: about F / 3 features per pass
    lanes = pow2_near(static_cast<double>(in.num_features) / static_cast<double>(3 * vec), 1, 32);
  } else {  // balanced threads hold kBalancedTile vectors each; row_parallel's lanes split rows
    const int64_t per_lane = vec * (schedule == Schedule::Balanced ? kBalancedTile : 1);
    lanes = schedule == Schedule::RowParallel ? p.max_lanes : 1;
    while (lanes < p.max_lanes && lanes * per_lane < in.num_features) lanes *= 2;
  }
  if (is_chunked(schedule) && chunk < 1) chunk = 256;
  return {static_cast<int64_t>(schedule), lanes, vec, std::max<int64_t>({p.threads, lanes, 32}), chunk};
}

}  // namespace pyg_fast::tuning

namespace {

void set_segment_rules(c10::ArrayRef<double> weights, c10::ArrayRef<double> features, c10::IntArrayRef params,
                       c10::IntArrayRef fallback) {
  using namespace pyg_fast;
  PF_CHECK_VALUE(weights.size() == 6 && fallback.size() == 4 && features.size() % 6 == 0 &&
                     params.size() == features.size() / 6 * 8,
                 "pyg_fast: set_segment_rules expects 6 weights, 6 features and 8 parameters per entry, "
                 "and 4 fallback parameters");
  tuning::set_rules(weights.data(), features.data(), params.data(), static_cast<int64_t>(features.size() / 6),
                    fallback.data());
}

std::vector<int64_t> segment_schedule(int64_t num_rows, int64_t num_segments, int64_t num_features,
                                      int64_t element_size, bool gather, int64_t feature_block, int64_t max_segment,
                                      bool graph_aware) {
  using namespace pyg_fast;
  PF_CHECK_VALUE(element_size > 0 && feature_block > 0 && num_features % feature_block == 0,
                 "pyg_fast: segment_schedule needs a positive element size and a feature block dividing F");
  const tuning::Config c = tuning::choose(
      {num_rows, num_segments, num_features, element_size, gather, feature_block, max_segment, graph_aware});
  return {c.begin(), c.end()};
}

std::vector<int64_t> segment_schedule_resolve(int64_t schedule, int64_t max_lanes, int64_t threads, int64_t chunk,
                                              int64_t num_rows, int64_t num_segments, int64_t num_features,
                                              int64_t element_size, int64_t feature_block) {
  using namespace pyg_fast;
  PF_CHECK_VALUE(schedule >= 0 && schedule < tuning::kNumSchedules, "pyg_fast: unknown schedule id ", schedule);
  PF_CHECK_VALUE(element_size > 0 && feature_block > 0 && num_features % feature_block == 0,
                 "pyg_fast: segment_schedule_resolve needs a positive element size and a feature block dividing F");
  const tuning::Config c = tuning::resolve(
      {static_cast<tuning::Schedule>(schedule), max_lanes, threads, chunk},
      {num_rows, num_segments, num_features, element_size, false, feature_block, -1, true});
  return {c.begin(), c.end()};
}

std::vector<double> segment_schedule_features(int64_t num_rows, int64_t num_segments, int64_t num_features,
                                              int64_t element_size, bool gather, int64_t max_segment) {
  const auto f = pyg_fast::tuning::features(
      {num_rows, num_segments, num_features, element_size, gather, num_features, max_segment, false});
  return {f.begin(), f.end()};
}

int64_t segment_schedule_entry(int64_t num_rows, int64_t num_segments, int64_t num_features, int64_t element_size,
                               bool gather, int64_t max_segment) {
  return pyg_fast::tuning::nearest(
      {num_rows, num_segments, num_features, element_size, gather, num_features, max_segment, false});
}

std::vector<std::string> segment_schedule_names() {
  std::vector<std::string> names;
  for (int i = 0; i < pyg_fast::tuning::kNumSchedules; ++i)
    names.emplace_back(pyg_fast::tuning::schedule_name(static_cast<pyg_fast::tuning::Schedule>(i)));
  return names;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  // Loads the measured schedule table (pyg_fast/tuning does so at import).
  m.def("set_segment_rules(float[] weights, float[] features, int[] params, int[] fallback) -> ()",
        &set_segment_rules);
  // The launch config ([schedule, lanes, vec, threads, chunk]) the table gives an input;
  // max_segment -1 where unknown. The CUDA ops make the same choice for an empty config.
  m.def("segment_schedule(int num_rows, int num_segments, int num_features, int element_size, bool gather, "
        "int feature_block, int max_segment, bool graph_aware) -> int[]",
        &segment_schedule);
  // The launch config of given table parameters (schedule id, max_lanes, threads, chunk) for an input.
  m.def("segment_schedule_resolve(int schedule, int max_lanes, int threads, int chunk, int num_rows, "
        "int num_segments, int num_features, int element_size, int feature_block) -> int[]",
        &segment_schedule_resolve);
  // The coordinates of an input in the table: (log2 E, log2 E/V, log2 F, element size, gather, log2 skew).
  m.def("segment_schedule_features(int num_rows, int num_segments, int num_features, int element_size, "
        "bool gather, int max_segment) -> float[]", &segment_schedule_features);
  // The index of the table entry nearest to an input (the one segment_schedule resolves), -1 for an
  // empty table.
  m.def("segment_schedule_entry(int num_rows, int num_segments, int num_features, int element_size, bool gather, "
        "int max_segment) -> int", &segment_schedule_entry);
  // Schedule names by id.
  m.def("segment_schedule_names() -> str[]", &segment_schedule_names);
}
