#pragma once
// The timeline's data: lanes of time intervals (host step/phase/layer/op
// ranges, CUDA API calls per host thread, kernels and copies per GPU stream),
// counter series, the steps' time spans, and the per-frame level of detail
// (culling to the visible window and merging items narrower than a pixel,
// as Tracy does, in O(pixels · log n) per lane).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "viz/model/run_data.h"

namespace lantern::view {

// One row of the timeline. Items of one lane do not overlap and are sorted by
// start (so ends are sorted too); `row` points into the source table.
struct Lane {
  enum Source : uint8_t { range = 0, kernel = 1 };
  std::string group;  // "host", "CUDA API", "GPU 0"
  std::string label;  // "step", "op", "thread 101", "stream 7"
  std::vector<double> t0, t1;   // µs since the run's time origin
  std::vector<uint32_t> row;    // index into index.ranges or index.kernels
  std::vector<uint8_t> source;  // Source per item
  std::vector<int32_t> name;    // string id (colour and label)
  size_t size() const { return t0.size(); }
};

struct CounterSeries {
  std::string name;  // "kv blocks: used"
  std::vector<double> t, v;
  double vmin = 0, vmax = 0;
};

struct StepSpan {
  int64_t step = -1;
  double t0 = 0, t1 = 0;
  std::string phase;
  uint32_t range_row = 0;  // the step range in index.ranges
  // When its tokens were collected, if after t1: an overlapped decode step,
  // whose range covers only its planning and launches (0: not overlapped).
  double collected = 0;
  // Where the step's work ends: its collection for an overlapped step (its
  // kernels run after its range), else its range's end.
  double end() const { return std::max(t1, collected); }
};

struct Mark {  // instant events (CUDA-graph replays)
  double t = 0;
  int64_t step = -1;
  int32_t name = -1;
};

struct TimelineModel {
  std::vector<Lane> lanes;
  std::vector<CounterSeries> counters;
  std::vector<StepSpan> steps;  // sorted by t0
  std::vector<Mark> marks;
  double t_begin = 0, t_end = 0;

  // The step whose span holds `t_us` (else the last step starting before it; -1 none).
  int64_t step_at(double t_us) const;
  const StepSpan* step(int64_t step) const;
  int lane_index(const std::string& label) const;  // -1 when absent
};

TimelineModel build_timeline(const RunData& run);

// A drawn item: one item (count 1) or `count` consecutive items starting at
// `first` merged into one block because each is narrower than `min_px`.
struct DrawItem {
  double t0 = 0, t1 = 0;
  uint32_t first = 0, count = 1;
};

// Items of a sorted, non-overlapping lane that intersect [view_t0, view_t1),
// with runs of sub-`min_px` items closer than `min_px` to each other merged.
// `us_per_px` is the zoom. Appends to `out` (cleared first).
void cull_and_merge(const double* t0, const double* t1, size_t n, double view_t0, double view_t1,
                    double us_per_px, double min_px, std::vector<DrawItem>& out);

// Per-pixel min and max of a counter series over [view_t0, view_t1): the
// polyline of a counter track at `pixels` columns (NaN where no sample; a
// column without a sample holds the previous value: counters are steps).
struct Envelope {
  std::vector<double> lo, hi;
};
Envelope decimate(const CounterSeries& s, double view_t0, double view_t1, int pixels);

}  // namespace lantern::view
