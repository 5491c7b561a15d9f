// Timeline level of detail: culling to the visible window and merging items
// narrower than a pixel, checked against a brute-force reference on random lanes.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tests/viz/recorded_run.h"
#include "tests/viz/synthetic_run.h"
#include "viz/model/run_data.h"
#include "viz/model/timeline_model.h"

namespace lantern::view {
namespace {

struct RandomLane {
  std::vector<double> t0, t1;
};

RandomLane random_lane(size_t n, std::mt19937_64& rng) {
  std::exponential_distribution<double> gap(1.0), width(0.5);
  RandomLane l;
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    t += gap(rng) * (i % 97 == 0 ? 50 : 1);  // clusters with visible holes between them
    l.t0.push_back(t);
    t += width(rng) * (i % 13 == 0 ? 40 : 1);
    l.t1.push_back(t);
  }
  return l;
}

TEST(TimelineLod, EveryVisibleItemIsDrawnExactlyOnceAndMergedOnlyWhenTiny) {
  auto& rng = test::rng();
  for (int trial = 0; trial < 20; ++trial) {
    RandomLane l = random_lane(5000, rng);
    std::uniform_real_distribution<double> u(0, l.t1.back());
    double a = u(rng), b = u(rng);
    if (a > b) std::swap(a, b);
    const double us_per_px = (b - a) / std::uniform_int_distribution<int>(50, 3000)(rng);
    std::vector<DrawItem> out;
    cull_and_merge(l.t0.data(), l.t1.data(), l.t0.size(), a, b, us_per_px, 1.0, out);

    // Reference: the items intersecting [a, b).
    std::vector<uint32_t> visible;
    for (uint32_t i = 0; i < l.t0.size(); ++i)
      if (l.t1[i] > a && l.t0[i] < b) visible.push_back(i);
    std::vector<uint32_t> covered;
    for (const DrawItem& d : out) {
      for (uint32_t i = d.first; i < d.first + d.count; ++i) covered.push_back(i);
      if (d.count > 1) {
        for (uint32_t i = d.first; i < d.first + d.count; ++i)
          EXPECT_LT(l.t1[i] - l.t0[i], us_per_px) << "a wide item was merged";
        for (uint32_t i = d.first + 1; i < d.first + d.count; ++i)
          EXPECT_LE(l.t0[i] - l.t1[i - 1], us_per_px + 1e-9) << "a visible gap was merged over";
      }
      EXPECT_DOUBLE_EQ(d.t0, l.t0[d.first]);
      EXPECT_DOUBLE_EQ(d.t1, l.t1[d.first + d.count - 1]);
    }
    // Covered = visible items (plus, at most, tiny items a run pulled in past b).
    ASSERT_GE(covered.size(), visible.size());
    EXPECT_TRUE(std::equal(visible.begin(), visible.end(), covered.begin()));
    for (size_t k = visible.size(); k < covered.size(); ++k) EXPECT_GE(l.t0[covered[k]], b);
    // Merging bounds the work: about one draw item per pixel at most.
    EXPECT_LE(out.size(), static_cast<size_t>((b - a) / us_per_px) * 2 + 8);
  }
}

TEST(TimelineLod, ZoomedOutMillionItemsBecomeAFewHundredBlocks) {
  std::vector<double> t0, t1;
  for (int i = 0; i < 1000000; ++i) t0.push_back(i * 3.0), t1.push_back(i * 3.0 + 2.0);
  std::vector<DrawItem> out;
  cull_and_merge(t0.data(), t1.data(), t0.size(), 0, 3e6, 3e6 / 1500, 1.0, out);
  ASSERT_EQ(out.size(), 1u);  // no gap as wide as a pixel: one block
  EXPECT_EQ(out[0].count, 1000000u);
  cull_and_merge(t0.data(), t1.data(), t0.size(), 300.5, 330, 0.01, 1.0, out);  // microsecond zoom
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out[0].first, 100u);
  EXPECT_EQ(out[0].count, 1u);
}

TEST(TimelineLod, CounterEnvelopeHoldsStepValues) {
  CounterSeries s;
  s.t = {0, 10, 20, 30};
  s.v = {1, 5, 2, 7};
  Envelope e = decimate(s, 0, 40, 4);
  ASSERT_EQ(e.lo.size(), 4u);
  EXPECT_EQ(e.lo[0], 1);
  EXPECT_EQ(e.hi[1], 5);
  EXPECT_EQ(e.lo[2], 2);
  EXPECT_EQ(e.hi[3], 7);
  Envelope fine = decimate(s, 12, 14, 2);  // between samples: the held value
  EXPECT_EQ(fine.lo[0], 5);
  EXPECT_EQ(fine.hi[1], 5);
}

TEST(TimelineModel, LanesOfASyntheticRunFromTheSideFileAndFromJsonAgree) {
  auto dir = test::scratch_dir("viz-timeline") / "run";
  test::SyntheticRunOptions o;
  o.kernels = 700;
  o.layers = 4;
  o.streams = 2;
  auto info = test::write_synthetic_run(dir, o);
  RunData fast = load_run(dir);
  ASSERT_TRUE(fast.index_from_side_file);
  EXPECT_FALSE(fast.has_errors()) << fast.messages[0].text;
  std::filesystem::remove(dir / "timeline.bin");
  RunData slow = load_run(dir);
  ASSERT_FALSE(slow.index_from_side_file);
  TimelineModel a = build_timeline(fast), b = build_timeline(slow);
  ASSERT_EQ(a.lanes.size(), b.lanes.size());
  for (size_t i = 0; i < a.lanes.size(); ++i) {
    EXPECT_EQ(a.lanes[i].label, b.lanes[i].label);
    EXPECT_EQ(a.lanes[i].t0, b.lanes[i].t0);
    EXPECT_EQ(a.lanes[i].t1, b.lanes[i].t1);
  }
  for (const char* label : {"step", "phase", "layer", "op", "stream 7", "stream 8"})
    EXPECT_GE(a.lane_index(label), 0) << label;
  size_t gpu_items = a.lanes[a.lane_index("stream 7")].size() + a.lanes[a.lane_index("stream 8")].size();
  EXPECT_EQ(gpu_items, static_cast<size_t>(info.kernels));
  EXPECT_EQ(static_cast<int64_t>(a.steps.size()), info.steps);
  EXPECT_EQ(a.steps[1].phase, "decode");
  EXPECT_EQ(a.step_at(a.steps[1].t0 + 1), a.steps[1].step);
  ASSERT_FALSE(a.counters.empty());
}

// Overlapped decode steps (docs/architecture.md, "Overlapped steps"): a
// step's host range covers only its planning and launches; its tokens are
// collected in the next step() call (trace step args collected_us). The
// timeline shows each such step in flight, from its range's end to its
// collection, on two lanes (even and odd steps: two are in flight at once).
// Recorded on the CPU backend with overlap on and off.
TEST(TimelineModel, OverlappedStepsAreInFlightFromTheirLaunchesToTheirCollection) {
  const auto& base = test::recorded_cpu_run();
  auto record = [&](const char* name, const char* overlap) {
    const std::filesystem::path dir = test::scratch_dir("viz-overlap") / name;
    test::CommandResult g = test::run_command(
        test::built_binary("lantern").string() + " generate --model " + base.model.string() +
        " --device cpu --prompt-ids 11,12,13,14,15 --repeat 2 --max-seqs 2 --max-new-tokens 14 --ignore-eos"
        " --quiet --kernels overlap=" + overlap + " --record " + dir.string());
    EXPECT_EQ(g.status, 0) << g.output;
    RunData run = load_run(dir);
    EXPECT_FALSE(run.has_errors()) << run.messages[0].text;
    return build_timeline(run);
  };
  const TimelineModel on = record("on", "on");
  const int even = on.lane_index("in flight (even steps)"), odd = on.lane_index("in flight (odd steps)");
  ASSERT_GE(even, 0);
  ASSERT_GE(odd, 0);
  size_t items = 0, overlapping_pairs = 0;
  for (int l : {even, odd}) {
    const Lane& lane = on.lanes[l];
    for (size_t i = 0; i < lane.size(); ++i) {
      ++items;
      const StepSpan* span = nullptr;
      for (const StepSpan& s : on.steps)
        if (s.range_row == lane.row[i]) span = &s;
      ASSERT_NE(span, nullptr) << "an in-flight item points at its step's range";
      EXPECT_EQ(span->step % 2, l == odd ? 1 : 0);
      EXPECT_DOUBLE_EQ(lane.t0[i], span->t1) << "in flight from the end of its launches";
      EXPECT_DOUBLE_EQ(lane.t1[i], span->collected);
      EXPECT_GT(span->collected, span->t1);
      EXPECT_DOUBLE_EQ(span->end(), span->collected);
      if (i + 1 < lane.size()) {
        EXPECT_LE(lane.t1[i], lane.t0[i + 1]) << "a lane never overlaps itself";
      }
    }
  }
  // 13 decode steps per request after the prefill; all but the length-stop
  // edges overlap.
  EXPECT_GE(items, 8u);
  // Step k + 1 is launched before step k is collected.
  for (const StepSpan& s : on.steps) {
    const StepSpan* next = on.step(s.step + 1);
    if (s.collected > 0 && next && next->collected > 0 && next->t1 < s.collected) ++overlapping_pairs;
  }
  EXPECT_GE(overlapping_pairs, 6u);

  const TimelineModel off = record("off", "off");
  EXPECT_LT(off.lane_index("in flight (even steps)"), 0);
  EXPECT_LT(off.lane_index("in flight (odd steps)"), 0);
  ASSERT_FALSE(off.steps.empty());
  for (const StepSpan& s : off.steps) {
    EXPECT_EQ(s.collected, 0) << "a synchronous step is collected inside its range";
    EXPECT_DOUBLE_EQ(s.end(), s.t1);
  }
}

}  // namespace
}  // namespace lantern::view
