// `lantern compare`'s model: metric lookup (summary medians, legacy keys),
// noise marks from repetition spreads, kernel tables, config diff, rendering.
#include "harness/experiment/compare.h"

#include <map>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/experiment/serving.h"

namespace lantern::experiment {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A run whose repetitions measured `throughputs` and whose kernels are one
// op "q_proj" at `us` per call in every repetition.
CompareRun make_run(const std::string& name, std::vector<double> throughputs, double us,
                    int max_seqs) {
  CompareRun r;
  r.name = name;
  r.dir = "/runs/" + name;
  std::vector<json> reps;
  int64_t step = 0;
  for (double t : throughputs) {
    reps.push_back({{"output_throughput", t}, {"step_range", {step, step + 2}}});
    for (int s = 0; s < 2; ++s, ++step) {
      runfmt::KernelRow k;
      k.launch = step;
      k.step = step;
      k.op = "q_proj";
      k.family = "gemm";
      k.variant_name = "cublas";
      k.dur_us = us;
      r.kernels.push_back(k);
    }
  }
  r.metrics = {{"repetitions", reps}, {"summary", summarize_repetitions(reps)}};
  r.manifest = {{"name", name},
                {"experiment", {{"resolved", {{"limits", {{"max_seqs", max_seqs}}}}}}}};
  return r;
}

TEST(Compare, MetricIsTheMedianWithTheRepetitionSpread) {
  CompareRun r = make_run("a", {100, 110, 90}, 5, 1);
  MetricValue m = metric_value(r, "output_throughput");
  ASSERT_TRUE(m.present);
  EXPECT_DOUBLE_EQ(m.value, 100);
  EXPECT_DOUBLE_EQ(m.spread, 0.2);
  EXPECT_FALSE(metric_value(r, "ttft_ms.p50").present);
}

TEST(Compare, LegacyRunsFromGenerateMapTheirKeys) {
  CompareRun r;
  r.metrics = {{"tokens_per_s", 42.0}, {"ttft_s", {{"p50", 0.25}}}};
  EXPECT_DOUBLE_EQ(metric_value(r, "output_throughput").value, 42);
  EXPECT_DOUBLE_EQ(metric_value(r, "ttft_ms.p50").value, 250);
  EXPECT_EQ(metric_value(r, "output_throughput").spread, -1);  // one repetition: no band
}

TEST(Compare, NoiseMarkComparesTheDifferenceWithTheLargerSpread) {
  MetricValue base{true, 100, 0.05};
  EXPECT_EQ(noise_mark(base, MetricValue{true, 104, 0.02}), "~");  // 4 % < 5 %
  EXPECT_EQ(noise_mark(base, MetricValue{true, 107, 0.02}), "*");  // 7 % > 5 %
  EXPECT_EQ(noise_mark(base, MetricValue{true, 107, 0.10}), "~");  // its own band is 10 %
  EXPECT_EQ(noise_mark(base, MetricValue{true, 150, -1}), "");     // one repetition: no mark
  EXPECT_EQ(noise_mark(MetricValue{}, MetricValue{true, 1, 0}), "");
}

TEST(Compare, TablesRatiosMarksAndConfigDiff) {
  CompareRun a = make_run("a", {100, 102, 98}, 10, 1);
  CompareRun b = make_run("b", {150, 151, 149}, 5, 4);
  Comparison c = compare_runs({a, b});
  ASSERT_FALSE(c.metrics.rows.empty());
  EXPECT_EQ(c.metrics.header, (std::vector<std::string>{"metric", "a", "b", "b/a"}));
  EXPECT_EQ(c.metrics.rows[0][0], "output throughput (tok/s)");
  EXPECT_EQ(c.metrics.rows[0][3], "1.500 *");
  ASSERT_EQ(c.ops.rows.size(), 1u);
  EXPECT_EQ(c.ops.rows[0][0], "q_proj");
  EXPECT_EQ(c.ops.rows[0][1], "gemm.cublas");
  EXPECT_EQ(c.ops.rows[0][2], "10.00");
  EXPECT_EQ(c.ops.rows[0][4], "0.500 *");  // per-call times are identical within each run: spread 0
  ASSERT_EQ(c.families.rows.size(), 1u);
  EXPECT_EQ(c.families.rows[0][1], "10.00");  // one 10 us call per traced step
  ASSERT_EQ(c.config.rows.size(), 1u);
  EXPECT_EQ(c.config.rows[0], (std::vector<std::string>{"limits.max_seqs", "1", "4"}));
}

// The runs' GPU clocks (manifest gpu.clocks) are noted under the metrics, with a
// warning when one ran throttled and the other did not.
TEST(Compare, GpuClocksAreNotedAndAMismatchWarned) {
  CompareRun a = make_run("a", {100, 102, 98}, 10, 1);
  CompareRun b = make_run("b", {100, 101, 99}, 10, 1);
  auto notes = [](const Comparison& c) {
    std::string all;
    for (const std::string& n : c.metrics.notes) all += n + "\n";
    return all;
  };
  EXPECT_THAT(notes(compare_runs({a, b})), ::testing::Not(HasSubstr("GPU clocks")));  // none recorded
  a.manifest["gpu"] = {{"clocks", {{"seconds", 2.0}, {"sm_mhz_start", 1980}, {"sm_mhz_end", 1980},
                                    {"sm_max_mhz", 1980}, {"power_cap_ms", 0.0}, {"throttled", false}}}};
  b.manifest["gpu"] = {{"clocks", {{"seconds", 2.0}, {"sm_mhz_start", 1980}, {"sm_mhz_end", 1860},
                                    {"sm_max_mhz", 1980}, {"power_cap_ms", 850.0}, {"throttled", true}}}};
  std::string n = notes(compare_runs({a, b}));
  EXPECT_THAT(n, HasSubstr("GPU clocks: a: SM 1980 -> 1980 MHz (max 1980), power cap 0.0 ms of 2000 ms; "
                           "b: SM 1980 -> 1860 MHz (max 1980), power cap 850.0 ms of 2000 ms (throttled)"));
  EXPECT_THAT(n, HasSubstr("WARNING: some runs ran throttled and some did not"));
  b.manifest["gpu"]["clocks"]["throttled"] = false;
  EXPECT_THAT(notes(compare_runs({a, b})), ::testing::Not(HasSubstr("WARNING")));
  b.manifest["gpu"]["clocks"] = {{"error", "no NVML"}};
  n = notes(compare_runs({a, b}));
  EXPECT_THAT(n, HasSubstr("b: not read (no NVML)"));
  EXPECT_THAT(n, ::testing::Not(HasSubstr("WARNING")));
}

// Graph-replayed decode steps record every replay of a node under the node's
// launch id, so one launch id appears in every traced step: a call is a
// (step, launch) pair. Here each step replays launch 7 (q_proj: two kernels,
// 3 + 1 us) and launch 8 (o_proj, 2 us) over 4 traced steps.
TEST(Compare, GraphReplaysAreOneCallPerStep) {
  CompareRun r = make_run("g", {100}, 0, 1);
  r.kernels.clear();
  r.metrics["repetitions"][0]["step_range"] = {10, 20};
  for (int64_t step = 10; step < 14; ++step)
    for (auto [launch, op, us] : {std::tuple{7, "q_proj", 3.0}, {7, "q_proj", 1.0}, {8, "o_proj", 2.0}}) {
      runfmt::KernelRow k;
      k.launch = launch;
      k.step = step;
      k.op = op;
      k.family = "gemm";
      k.variant_name = "lt";
      k.dur_us = us;
      r.kernels.push_back(k);
    }
  Comparison c = compare_runs({r, r});
  ASSERT_EQ(c.ops.rows.size(), 2u);
  EXPECT_EQ(c.ops.rows[0][0], "q_proj");
  EXPECT_EQ(c.ops.rows[0][2], "4.00");  // per call, not summed over the 4 replays (16)
  EXPECT_EQ(c.ops.rows[1][0], "o_proj");
  EXPECT_EQ(c.ops.rows[1][2], "2.00");
  ASSERT_EQ(c.families.rows.size(), 1u);
  EXPECT_EQ(c.families.rows[0][1], "6.00");  // per traced step
  EXPECT_THAT(c.families.notes.at(0), HasSubstr("repetitions with traced kernels: g: 1 of 1"));
  EXPECT_EQ(c.families.notes.size(), 1u);  // nothing missed: no advice
}

// PDL-launched kernels start early and wait: their durations overlap. The
// critical-path table charges each kernel only what it adds past the latest end
// before it: qkv [0, 10], rope [2, 15] (waited 8 us) and attention [15, 16] give
// 10 + 5 + 1 = 16 us per step, the step's span; a second device's rows (another
// rank) are left out.
TEST(Compare, CriticalPathChargesOverlapOnce) {
  CompareRun r = make_run("p", {100}, 0, 1);
  r.kernels.clear();
  r.metrics["repetitions"][0]["step_range"] = {0, 10};
  int64_t launch = 0;
  for (int64_t step = 0; step < 2; ++step)
    for (auto [op, start, dur, device] : {std::tuple{"qkv_proj", 0.0, 10.0, 0}, {"rope_kv_write", 2.0, 13.0, 0},
                                          {"attention_decode", 15.0, 1.0, 0}, {"qkv_proj", 0.0, 99.0, 1}}) {
      runfmt::KernelRow k;
      k.launch = launch++;
      k.step = step;
      k.op = op;
      k.family = "f";
      k.start_us = 1000.0 * step + start;
      k.dur_us = dur;
      k.device = device;
      r.kernels.push_back(k);
    }
  Comparison c = compare_runs({r, r});
  std::map<std::string, std::string> path;
  for (const auto& row : c.path.rows) path[row[0]] = row[1];
  EXPECT_EQ(path["qkv_proj"], "10.00");
  EXPECT_EQ(path["rope_kv_write"], "5.00");  // its 13 us duration includes the wait
  EXPECT_EQ(path["attention_decode"], "1.00");
  EXPECT_EQ(path["(step span)"], "16.00");
  EXPECT_EQ(c.path.rows[0][0], "(step span)");  // largest first
}

// A run whose CUPTI windows missed a repetition: the notes say how many the
// medians cover and how to trace every repetition.
TEST(Compare, RepetitionsWithoutKernelRowsAreNamed) {
  CompareRun a = make_run("a", {100, 100, 100}, 4, 1);
  std::erase_if(a.kernels, [](const runfmt::KernelRow& k) { return k.step < 2; });  // repetition 1 untraced
  Comparison c = compare_runs({a, make_run("b", {1, 1, 1}, 2, 1)});
  ASSERT_EQ(c.families.notes.size(), 2u);
  EXPECT_THAT(c.families.notes[0], HasSubstr("a: 2 of 3, b: 3 of 3"));
  EXPECT_THAT(c.families.notes[1], HasSubstr("harness.cupti_window=8:64"));
  EXPECT_EQ(c.ops.rows[0][2], "4.00");  // the median over the two traced repetitions
}

TEST(Compare, RunsWithTheSameNameAreToldApartByDirectory) {
  CompareRun a = make_run("x", {1, 1}, 1, 1), b = make_run("x", {1, 1}, 1, 1);
  a.dir = "/r/first";
  b.dir = "/r/second";
  Comparison c = compare_runs({a, b});
  EXPECT_EQ(c.metrics.header[1], "first");
  EXPECT_EQ(c.metrics.header[2], "second");
  EXPECT_TRUE(c.config.rows.empty());
}

TEST(Table, RendersTextCsvAndMarkdown) {
  Table t{"title", {"k", "v"}, {{"a,b", "1"}, {"c|d", "22"}}, {"note"}};
  EXPECT_EQ(render(t, TableFormat::csv), "k,v\n\"a,b\",1\nc|d,22\n");
  std::string md = render(t, TableFormat::markdown);
  EXPECT_THAT(md, HasSubstr("| k | v |\n| --- | ---: |\n| a,b | 1 |\n| c\\|d | 22 |\n"));
  std::string text = render(t, TableFormat::text);
  EXPECT_EQ(text, "title\n  k    v\n  a,b  1\n  c|d 22\n  note\n");
}

}  // namespace
}  // namespace lantern::experiment
