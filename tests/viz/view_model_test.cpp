// The viewer's data layer: address-map layout, Gantt bars, KV heatmap
// binning, kernel statistics, experiment diffs, and loading damaged runs.
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>

#include "harness/runfmt/summary.h"

#include "harness/runfmt/run_dir.h"
#include "tests/test_util.h"
#include "tests/viz/synthetic_run.h"
#include "viz/model/address_map.h"
#include "viz/model/experiment_model.h"
#include "viz/model/kernel_stats.h"
#include "viz/model/kv_model.h"
#include "viz/model/lifetimes.h"
#include "viz/model/run_data.h"

namespace lantern::view {
namespace {

runfmt::Allocation alloc(const char* owner, const char* name, uint64_t address, uint64_t bytes,
                         double t0 = 0, std::optional<double> t1 = std::nullopt) {
  runfmt::Allocation a;
  a.owner = owner;
  a.name = name;
  a.address = address;
  a.bytes = bytes;
  a.alloc_us = t0;
  a.free_us = t1;
  return a;
}

TEST(AddressMap, SegmentsAreToScaleInAddressOrderWithHugeHolesCollapsed) {
  std::vector<runfmt::Allocation> a = {
      alloc("arena", "activation arena", 0x7f0000000000, 4000),
      alloc("weights", "weight block", 0x1000, 90000),
      alloc("kv_pool", "KV blocks", 0x1000 + 90000 + 100, 6000),  // small hole: kept to scale
      alloc("workspace", "freed early", 0x900000000, 10, 0, 5.0)};
  MapLayout m = layout_address_map(a, 10.0, 0.02);
  ASSERT_EQ(m.segments.size(), 3u);  // the workspace was freed at 5 µs
  EXPECT_EQ(m.segments[0].allocation, 1);
  EXPECT_EQ(m.segments[1].allocation, 2);
  EXPECT_EQ(m.segments[2].allocation, 0);
  for (const MapSegment& s : m.segments) EXPECT_DOUBLE_EQ(s.x1 - s.x0, static_cast<double>(s.bytes));
  EXPECT_DOUBLE_EQ(m.segments[1].x0 - m.segments[0].x1, 100.0);
  EXPECT_DOUBLE_EQ(m.segments[2].x0 - m.segments[1].x1, m.gap);
  EXPECT_DOUBLE_EQ(m.gap, 0.02 * 100000);
  EXPECT_GT(m.segments[2].hole_before, 1ull << 40);
  EXPECT_DOUBLE_EQ(m.width, m.segments[2].x1);
  auto totals = category_totals(a, 10.0);
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals[0].category, "weights");
  EXPECT_EQ(totals[0].bytes, 90000u);
  EXPECT_EQ(kv_pool_allocation(a), 2);
}

runfmt::MemoryMap aliased_memory() {
  runfmt::MemoryMap m;
  m.buffers = {{"q_attn", 0, 100, "[4] f32"}, {"x", 100, 100, "[4] f32"}};
  m.views = {{0, "q", 0, 0, 100}, {1, "attn_out", 0, 0, 100}, {2, "x", 1, 0, 100}};
  runfmt::AccessPattern p;
  p.id = 3;
  for (const char* op : {"embed", "q_proj", "attention", "o_proj", "bad_write", "late_read"})
    p.ops.push_back({op, 0});
  // q: written by q_proj (1), read by attention (2); attn_out written in place
  // by attention (2), read by o_proj (3): touching, not overlapping. A bad
  // plan: attn_out written again (never read) at 4 while q, rewritten at 3, is read at 5.
  p.intervals = {{0, 1, 2}, {1, 2, 3}, {0, 3, 5}, {1, 4, -1}, {2, -1, 4}};
  m.patterns.push_back(p);
  m.step_patterns = {{0, 3}, {1, 3}};
  runfmt::AliasIssue issue;
  issue.kind = "clobber";
  issue.view = "attn_out";
  issue.victim = "q";
  m.violations.push_back(issue);
  return m;
}

TEST(Lifetimes, BarsPerViewAndOverlapsOnlyBetweenViewsOfOneBuffer) {
  runfmt::MemoryMap m = aliased_memory();
  EXPECT_EQ(pattern_of_step(m, 1), 3);
  EXPECT_EQ(pattern_of_step(m, 9), -1);
  Gantt g = build_gantt(m, 3);
  ASSERT_EQ(g.rows.size(), 3u);
  EXPECT_EQ(g.ops, 6);
  const GanttRow& q = g.rows[0];
  const GanttRow& attn = g.rows[1];
  const GanttRow& x = g.rows[2];
  EXPECT_EQ(attn.label, "attn_out  (q_attn)");
  ASSERT_EQ(q.bars.size(), 2u);
  ASSERT_EQ(attn.bars.size(), 2u);
  EXPECT_FALSE(q.bars[0].overlaps);     // [1,2] vs attn [2,3]: in-place, touching
  EXPECT_TRUE(q.bars[1].overlaps);      // [3,5] vs attn [4,4]
  EXPECT_TRUE(attn.bars[1].overlaps);
  EXPECT_TRUE(attn.bars[1].unread);
  EXPECT_EQ(g.overlapping_pairs, 1);
  EXPECT_TRUE(q.bars[0].violation);     // named by the clobber
  ASSERT_EQ(x.bars.size(), 1u);
  EXPECT_TRUE(x.bars[0].stale);
  EXPECT_EQ(x.bars[0].first, 0);
  EXPECT_FALSE(x.bars[0].overlaps);     // another buffer
  EXPECT_EQ(build_gantt(m, 42).rows.size(), 0u);
}

runfmt::KvData kv_history() {
  runfmt::KvData kv;
  kv.block_size = 16;
  kv.total_blocks = 6;
  // step 0: seq 1 takes 0,1 (layers 0,1); seq 2 takes 2. step 1: seq 3 takes 3.
  // step 2: seq 1 preempted (frees 0,1). step 3: seq 1 back on 4,5; seq 2 finishes.
  kv.events = {{0, 1, 0, 0, 0, 0}, {0, 1, 1, 1, 0, 0}, {0, 2, 2, 0, 0, 0}, {1, 3, 3, 0, 0, 0},
               {2, 1, 0, 0, 1, 0}, {2, 1, 1, 1, 1, 0}, {3, 1, 4, 0, 0, 0}, {3, 1, 5, 1, 0, 0},
               {3, 2, 2, 0, 1, 0}};
  for (int s = 0; s < 4; ++s) {
    runfmt::KvStepRecord r;
    r.step = s;
    kv.steps.push_back(r);
  }
  return kv;
}

TEST(KvModel, OwnersBlockTablesAndSequenceEventsReplayTheLedger) {
  runfmt::KvData kv = kv_history();
  EXPECT_EQ(owners_at(kv, 0), (std::vector<int64_t>{1, 1, 2, -1, -1, -1}));
  EXPECT_EQ(owners_at(kv, 2), (std::vector<int64_t>{-1, -1, 2, 3, -1, -1}));
  EXPECT_EQ(owners_at(kv, 3), (std::vector<int64_t>{-1, -1, -1, 3, 1, 1}));
  auto tables = block_tables_at(kv, 3);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[1][0], std::vector<int32_t>{4});
  EXPECT_EQ(tables[1][1], std::vector<int32_t>{5});
  EXPECT_EQ(tables[3][0], std::vector<int32_t>{3});
  auto events = sequence_events(kv);
  int admits = 0, preempts = 0, finishes = 0;
  for (const SeqEvent& e : events) {
    admits += e.kind == SeqEvent::admit;
    preempts += e.kind == SeqEvent::preempt;
    finishes += e.kind == SeqEvent::finish;
    if (e.kind == SeqEvent::preempt) {
      EXPECT_EQ(e.seq, 1);
      EXPECT_EQ(e.step, 2);
    }
    if (e.kind == SeqEvent::finish) {
      EXPECT_EQ(e.seq, 2);
      EXPECT_EQ(e.step, 3);
    }
  }
  EXPECT_EQ(admits, 4);  // 1, 2, 3, and 1 again
  EXPECT_EQ(preempts, 1);
  EXPECT_EQ(finishes, 1);
}

TEST(KvModel, HeatmapBinsMatchTheUnbinnedOwners) {
  runfmt::KvData kv = kv_history();
  KvHeatmap full = bin_kv(kv, 100, 100);
  ASSERT_EQ(full.block_bins, 6);
  ASSERT_EQ(full.step_bins, 4);
  for (int s = 0; s < 4; ++s) {
    auto owners = owners_at(kv, s);
    for (int b = 0; b < 6; ++b) {
      EXPECT_EQ(full.owner[s * 6 + b], owners[b]) << "step " << s << " block " << b;
      EXPECT_EQ(full.used[s * 6 + b], owners[b] >= 0 ? 1.f : 0.f);
    }
  }
  KvHeatmap binned = bin_kv(kv, 3, 2);  // 2 blocks per bin, 2 steps per bin
  ASSERT_EQ(binned.block_bins, 3);
  ASSERT_EQ(binned.step_bins, 2);
  // Column 1 = after step 3: bins {-,-}, {-,3}, {1,1}.
  EXPECT_FLOAT_EQ(binned.used[1 * 3 + 0], 0.f);
  EXPECT_FLOAT_EQ(binned.used[1 * 3 + 1], 0.5f);
  EXPECT_EQ(binned.owner[1 * 3 + 1], 3);
  EXPECT_FLOAT_EQ(binned.used[1 * 3 + 2], 1.f);
  EXPECT_EQ(binned.owner[1 * 3 + 2], 1);
}

TEST(KernelStats, GroupsSortsAndFiltersAgainstAHandComputedReference) {
  auto dir = test::scratch_dir("viz-stats") / "run";
  test::SyntheticRunOptions o;
  o.kernels = 500;
  o.layers = 2;
  o.pdl_overlap = 0.4;  // every third kernel starts under its predecessor's last 40 %
  test::write_synthetic_run(dir, o);
  RunData run = load_run(dir);
  auto stats = kernel_stats(run, StatsGroup::op);
  // Reference from kernels.csv rows through runfmt (independent of the index).
  runfmt::Run ref = runfmt::RunReader::open(dir);
  std::map<std::string, std::vector<double>> durs;
  double total = 0;
  for (const auto& k : ref.kernels) durs[k.op].push_back(k.dur_us), total += k.dur_us;
  ASSERT_EQ(stats.size(), durs.size());
  double share_sum = 0;
  for (const KernelStat& s : stats) {
    auto d = durs.at(s.key);
    EXPECT_EQ(s.count, static_cast<int64_t>(d.size()));
    EXPECT_NEAR(s.total_us, std::accumulate(d.begin(), d.end(), 0.0), 1e-6);
    std::sort(d.begin(), d.end());
    EXPECT_DOUBLE_EQ(s.p50_us, d[(d.size() + 1) / 2 - 1]);
    EXPECT_DOUBLE_EQ(s.p99_us, d[static_cast<size_t>(std::ceil(0.99 * d.size())) - 1]);
    EXPECT_GT(s.gb_per_s, 0);
    EXPECT_GT(s.pct_roofline, 0);
    share_sum += s.share_of_steps;
  }
  EXPECT_GT(share_sum, 0.5);  // kernels cover most of each step (host gaps between them)
  EXPECT_LE(share_sum, 1.0);
  // Wall time: the same per op as runfmt::summarize computes from kernels.csv's rows.
  std::map<std::string, double> ref_wall;
  for (const runfmt::TimeSummary& t : runfmt::summarize(ref.kernels, runfmt::GroupBy::op)) ref_wall[t.key] = t.wall_us;
  double wall_share_sum = 0;
  for (const KernelStat& s : stats) {
    EXPECT_NEAR(s.wall_us, ref_wall.at(s.key), 1e-6) << s.key;
    EXPECT_LE(s.wall_us, s.total_us + 1e-9) << s.key;
    wall_share_sum += s.wall_share;
  }
  EXPECT_NEAR(wall_share_sum, 1.0, 1e-9);
  double wall_sum = 0;
  for (const KernelStat& s : stats) wall_sum += s.wall_us;
  EXPECT_LT(wall_sum, total * 0.97) << "the overlapped starts are charged once";
  auto by_wall = stats;
  sort_stats(by_wall, StatsColumn::wall, false);
  for (size_t i = 1; i < by_wall.size(); ++i) EXPECT_GE(by_wall[i - 1].wall_us, by_wall[i].wall_us);
  for (size_t i = 1; i < stats.size(); ++i) EXPECT_GE(stats[i - 1].total_us, stats[i].total_us);
  sort_stats(stats, StatsColumn::mean, true);
  for (size_t i = 1; i < stats.size(); ++i) EXPECT_LE(stats[i - 1].mean_us, stats[i].mean_us);
  sort_stats(stats, StatsColumn::key, true);
  EXPECT_EQ(stats.front().key, "attention");
  auto hits = filter_stats(stats, "PROJ");
  EXPECT_EQ(hits.size(), 5u);  // q_proj k_proj v_proj o_proj down_proj
  auto by_variant = kernel_stats(run, StatsGroup::family_variant);
  bool saw_gemm = false;
  for (const auto& s : by_variant) saw_gemm = saw_gemm || s.key == "gemm.cublas";
  EXPECT_TRUE(saw_gemm);
}

TEST(Experiment, RunClocksLine) {
  EXPECT_EQ(run_clocks_line(nlohmann::json::object()), "");  // a CPU run: no gpu
  EXPECT_EQ(run_clocks_line({{"gpu", {{"name", "H200"}}}}), "");  // a run from before gpu.clocks
  nlohmann::json m = {{"gpu",
                       {{"clocks", {{"seconds", 2.5}, {"sm_mhz_start", 1980}, {"sm_mhz_end", 1860}, {"sm_max_mhz", 1980},
                                    {"power_cap_ms", 412.5}, {"thermal_ms", 0.0}, {"throttled", true}}}}}};
  EXPECT_EQ(run_clocks_line(m), "SM 1980 -> 1860 MHz (max 1980), power cap 412.5 ms, thermal 0.0 ms of 2500 ms -- THROTTLED");
  m["gpu"]["clocks"]["throttled"] = false;
  m["gpu"]["clocks"]["power_cap_ms"] = nullptr;  // the driver does not report it
  EXPECT_EQ(run_clocks_line(m), "SM 1980 -> 1860 MHz (max 1980), thermal 0.0 ms of 2500 ms");
  m["gpu"]["clocks"]["thermal_ms"] = nullptr;
  EXPECT_EQ(run_clocks_line(m), "SM 1980 -> 1860 MHz (max 1980)");
  m["gpu"]["clocks"] = {{"error", "no NVML"}};
  EXPECT_EQ(run_clocks_line(m), "not read (no NVML)");
}

TEST(Experiment, ConfigDiffAndSweepSeries) {
  nlohmann::json a = {{"limits", {{"max_seqs", 4}, {"kv_block_size", 16}}}, {"backend", "cuda"}};
  nlohmann::json b = {{"limits", {{"max_seqs", 8}, {"kv_block_size", 16}}}, {"extra", true}};
  auto d = diff_json(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "backend");
  EXPECT_EQ(d[0].b, "");
  EXPECT_EQ(d[2].key, "limits.max_seqs");
  ASSERT_TRUE(d[2].ratio.has_value());
  EXPECT_DOUBLE_EQ(*d[2].ratio, 2.0);

  auto sweep_dir = test::scratch_dir("viz-sweep");
  for (int seqs : {2, 8, 4}) {
    test::SyntheticRunOptions o;
    o.kernels = 50;
    o.layers = 1;
    o.sequences = seqs;
    test::write_synthetic_run(sweep_dir / ("seqs" + std::to_string(seqs)), o);
  }
  Sweep s = load_sweep(sweep_dir);
  ASSERT_EQ(s.points.size(), 3u);
  ASSERT_FALSE(s.parameters.empty());
  EXPECT_EQ(s.parameters[0], "limits.max_seqs");
  auto series = sweep_series(s, "limits.max_seqs", "requests");
  ASSERT_EQ(series.size(), 3u);
  EXPECT_EQ(series[0].first, 2);
  EXPECT_EQ(series[2].first, 8);
}

TEST(RunData, DamagedRunsOpenWithMessagesInsteadOfThrowing) {
  auto root = test::scratch_dir("viz-damaged");
  test::SyntheticRunOptions o;
  o.kernels = 100;
  o.layers = 1;
  auto write = [&](const char* name) {
    test::write_synthetic_run(root / name, o);
    return root / name;
  };
  auto has = [](const RunData& r, const std::string& text) {
    for (const auto& m : r.messages)
      if (m.text.find(text) != std::string::npos) return true;
    return false;
  };
  // Corrupt kv.json: the rest loads.
  auto corrupt = write("corrupt");
  std::ofstream(corrupt / "kv.json") << "{\"format_version\": \"1.0\", \"block_si";
  RunData r1 = load_run(corrupt);
  EXPECT_TRUE(r1.has_errors());
  EXPECT_TRUE(has(r1, "kv.json is not valid JSON")) << (r1.messages.empty() ? "" : r1.messages[0].text);
  EXPECT_FALSE(r1.memory.allocations.empty());
  EXPECT_GT(r1.index.find("kernels")->rows, 0u);
  // A newer major version.
  auto newer = write("newer");
  nlohmann::json m = nlohmann::json::parse(std::ifstream(newer / "manifest.json"));
  m["format_version"] = "2.0";
  std::ofstream(newer / "manifest.json") << m.dump();
  RunData r2 = load_run(newer);
  EXPECT_TRUE(has(r2, "newer than this lantern reads"));
  // Cut short: no manifest.
  auto cut = write("cut");
  std::filesystem::remove(cut / "manifest.json");
  RunData r3 = load_run(cut);
  EXPECT_FALSE(r3.has_manifest);
  EXPECT_TRUE(has(r3, "manifest.json: missing"));
  // A truncated side file: falls back to the JSON with a warning.
  auto trunc = write("truncated-index");
  std::filesystem::resize_file(trunc / "timeline.bin", 100);
  RunData r4 = load_run(trunc);
  EXPECT_FALSE(r4.index_from_side_file);
  EXPECT_TRUE(has(r4, "timeline.bin: truncated"));
  EXPECT_EQ(r4.index.find("kernels")->rows, 100u);
  // Not a directory.
  EXPECT_TRUE(load_run(root / "nope").has_errors());
}

}  // namespace
}  // namespace lantern::view
