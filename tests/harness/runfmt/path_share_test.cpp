// runfmt::path_shares / summarize's wall time / idle_gaps: what each
// kernel adds to its step's busy time when launches overlap (PDL), checked
// against a cell-by-cell reference on random integer timelines.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "harness/runfmt/summary.h"
#include "tests/test_util.h"

namespace lantern::runfmt {
namespace {

KernelRow row(const std::string& op, int64_t step, double start, double dur, int device = 0) {
  KernelRow r;
  r.op = op;
  r.family = "gemm";
  r.variant_name = "v";
  r.kernel = op + "_kernel";
  r.source = "cupti";
  r.step = step;
  r.phase = "prefill";
  r.device = device;
  r.start_us = start;
  r.dur_us = dur;
  return r;
}

// A drains while B (PDL) starts; C after an idle gap; D inside B.
TEST(PathShares, OverlapGapAndContainedKernels) {
  const std::vector<KernelRow> rows = {row("a", 0, 0, 10), row("b", 0, 8, 5), row("c", 0, 15, 2),
                                       row("d", 0, 9, 1)};
  std::vector<const KernelRow*> ptrs;
  for (const KernelRow& r : rows) ptrs.push_back(&r);
  const std::vector<PathShare> p = path_shares(ptrs);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].row->op, "a");
  EXPECT_DOUBLE_EQ(p[0].busy_us, 10);
  EXPECT_EQ(p[1].row->op, "b");
  EXPECT_DOUBLE_EQ(p[1].busy_us, 3);  // 10 .. 13
  EXPECT_EQ(p[2].row->op, "d");
  EXPECT_DOUBLE_EQ(p[2].busy_us, 0);  // inside a
  EXPECT_DOUBLE_EQ(p[2].gap_before_us, 0);
  EXPECT_EQ(p[3].row->op, "c");
  EXPECT_DOUBLE_EQ(p[3].busy_us, 2);
  EXPECT_DOUBLE_EQ(p[3].gap_before_us, 2);  // 13 .. 15 idle
  EXPECT_DOUBLE_EQ(idle_in_steps_us(idle_gaps(rows)), 2);

  const auto ops = summarize(rows, GroupBy::op);
  std::map<std::string, const TimeSummary*> by;
  for (const TimeSummary& s : ops) by[s.key] = &s;
  EXPECT_DOUBLE_EQ(by["b"]->total_us, 5);
  EXPECT_DOUBLE_EQ(by["b"]->wall_us, 3);
  EXPECT_DOUBLE_EQ(by["a"]->wall_share, 10.0 / 15.0);
  EXPECT_DOUBLE_EQ(by["d"]->wall_us, 0);
}

// Steps and devices are separate timelines: a kernel of step 1 is not charged
// against step 0's, and idle time between steps is not "inside" one.
TEST(PathShares, StepsAndDevicesAreSeparate) {
  const std::vector<KernelRow> rows = {row("a", 0, 0, 10),     row("a", 1, 5, 10),        row("b", 0, 100, 1),
                                       row("a", 0, 2, 4, 1),   row("x", -1, 200, 3),      row("x", -1, 300, 3)};
  const auto ops = summarize(rows, GroupBy::op);
  std::map<std::string, double> wall;
  for (const TimeSummary& s : ops) wall[s.key] = s.wall_us;
  EXPECT_DOUBLE_EQ(wall["a"], 10 + 10 + 4);
  EXPECT_DOUBLE_EQ(wall["b"], 1);
  EXPECT_DOUBLE_EQ(wall["x"], 6);
  EXPECT_DOUBLE_EQ(idle_in_steps_us(idle_gaps(rows)), 90) << "step 0 on device 0 only; rows outside steps don't count";
  EXPECT_DOUBLE_EQ(idle_in_steps_us(idle_gaps(rows, "decode")), 0);
}

// Gaps are keyed by the op whose end they follow (the latest end so far, not
// the latest start) and the op that ends them.
TEST(PathShares, IdleGapsByTheOpsAroundThem) {
  const std::vector<KernelRow> rows = {row("a", 0, 0, 10),  row("b", 0, 8, 5),   row("c", 0, 15, 2),
                                       row("d", 0, 9, 1),   row("a", 1, 0, 10),  row("c", 1, 12, 1),
                                       row("b", 1, 20, 1),  row("x", -1, 500, 1), row("y", -1, 900, 1)};
  const std::vector<GapSummary> g = idle_gaps(rows);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].before, "c");
  EXPECT_EQ(g[0].after, "b");
  EXPECT_DOUBLE_EQ(g[0].total_us, 7);
  EXPECT_EQ(g[1].before, "a");  // d ended inside a: the gap follows b in step 0, a in step 1
  EXPECT_EQ(g[1].after, "c");
  EXPECT_EQ(g[2].before, "b");
  EXPECT_EQ(g[2].after, "c");
  for (const GapSummary& x : g) EXPECT_EQ(x.count, 1);
  EXPECT_DOUBLE_EQ(g[1].max_us, 2);
  EXPECT_TRUE(idle_gaps(rows, "decode").empty());
}

// Random integer timelines: each row's busy share equals the unit cells it
// covers that no earlier-starting row covers; shares sum to the union, shares
// plus gaps to the span.
TEST(PathShares, MatchTheCellReferenceOnRandomTimelines) {
  std::mt19937 rng(static_cast<unsigned>(test::test_seed()));
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<KernelRow> rows;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i)
      rows.push_back(row("op" + std::to_string(rng() % 4), 0, double(rng() % 60), double(rng() % 15)));
    std::vector<const KernelRow*> ptrs;
    for (const KernelRow& r : rows) ptrs.push_back(&r);
    const std::vector<PathShare> p = path_shares(ptrs);
    std::vector<const KernelRow*> order = ptrs;  // the reference's own order: by start, stable
    std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->start_us < b->start_us; });
    std::vector<bool> cell(100, false);
    double busy = 0, sum_shares = 0, sum_all = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      int fresh = 0;
      for (int c = int(order[i]->start_us); c < int(order[i]->start_us + order[i]->dur_us); ++c)
        if (!cell[c]) cell[c] = true, ++fresh;
      ASSERT_EQ(p[i].row, order[i]) << trial;
      EXPECT_DOUBLE_EQ(p[i].busy_us, fresh) << "trial " << trial << " row " << i;
      busy += fresh;
      sum_shares += p[i].busy_us;
      sum_all += p[i].busy_us + p[i].gap_before_us;
    }
    double first = 1e9, last = -1e9;
    for (const KernelRow& r : rows) first = std::min(first, r.start_us), last = std::max(last, r.start_us + r.dur_us);
    EXPECT_DOUBLE_EQ(sum_shares, busy) << trial;
    EXPECT_DOUBLE_EQ(sum_all, last - first) << trial;
    EXPECT_DOUBLE_EQ(idle_in_steps_us(idle_gaps(rows)), last - first - busy) << trial;
    double gap_total = 0;
    int64_t gap_count = 0;
    for (const GapSummary& g : idle_gaps(rows)) gap_total += g.total_us, gap_count += g.count;
    EXPECT_DOUBLE_EQ(gap_total, last - first - busy) << trial;
    // Maximal idle runs of cells inside the span; a zero-length row inside an idle run splits
    // it in two (the GPU ran something), which cells cannot show: counted only without them.
    int64_t ref_count = 0;
    for (int c = int(first) + 1; c < int(last); ++c) ref_count += !cell[c] && cell[c - 1];
    if (std::none_of(rows.begin(), rows.end(), [](const KernelRow& r) { return r.dur_us == 0; })) {
      EXPECT_EQ(gap_count, ref_count) << trial;
    }
  }
}

}  // namespace
}  // namespace lantern::runfmt
