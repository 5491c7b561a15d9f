// trace.json: built from recorded ranges, written, parsed back as JSON and
// checked: nesting per thread, microsecond units, counter tracks, names.
#include "harness/runfmt/trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"

#include "harness/attribution.h"
#include "harness/kv_recorder.h"
#include "harness/metrics.h"
#include "harness/memory_recorder.h"
#include "harness/observer_set.h"
#include "harness/timeline.h"
#include "harness/trace_builder.h"
#include "tests/harness/seed_plan.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

using runfmt::TraceEvent;
using ::testing::HasSubstr;

// 1 microsecond per clock read, starting at 1 ms.
uint64_t g_ns = 0;
uint64_t fake_clock() { return g_ns += 1000; }

TraceEvent x(const char* name, double ts, double dur, int tid = 1) {
  TraceEvent e;
  e.ph = 'X';
  e.name = name;
  e.ts_us = ts;
  e.dur_us = dur;
  e.pid = 1;
  e.tid = tid;
  return e;
}

TEST(TraceCheck, AcceptsNestedAndRejectsCrossingRanges) {
  std::vector<TraceEvent> good = {x("step", 0, 10), x("phase", 0, 10), x("op a", 1, 2),
                                  x("op b", 3, 7), x("other thread", 5, 20, 2)};
  EXPECT_TRUE(runfmt::check_trace(good).empty());
  std::vector<TraceEvent> bad = {x("step", 0, 10), x("op", 8, 5)};
  auto problems = runfmt::check_trace(bad);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("'op' [8.000, 13.000] overlaps 'step'"));

  TraceEvent b = x("B", 0, 0), e = x("", 1, 0), orphan = x("", 2, 0);
  b.ph = 'B';
  e.ph = 'E';
  orphan.ph = 'E';
  EXPECT_TRUE(runfmt::check_trace({b, e}).empty());
  EXPECT_EQ(runfmt::check_trace({b}).size(), 1u);
  EXPECT_EQ(runfmt::check_trace({b, e, orphan}).size(), 1u);

  TraceEvent c = x("kv", 1, 0);
  c.ph = 'C';
  c.args = {{"used", "three"}};
  EXPECT_EQ(runfmt::check_trace({c}).size(), 1u);
  c.args = {{"used", 3}};
  EXPECT_TRUE(runfmt::check_trace({c}).empty());
}

TEST(TraceJson, WrittenTraceParsesNestsAndUsesMicroseconds) {
  g_ns = 1'000'000;
  const uint64_t origin = 1'000'000;
  Timeline timeline(fake_clock);
  KvRecorder kv(fake_clock);
  MemoryRecorder memory(fake_clock);
  ObserverSet set;
  set.add(&timeline);
  set.add(&kv);
  set.add(&memory);
  auto a = testing::make_seed_arena();
  set.on_alloc(AllocEvent{"arena", "activation arena", 0x1000, a->arena.total_bytes(),
                          kernels::Backend::cpu, false});
  set.on_arena(a->arena);
  for (int s = 0; s < 3; ++s) {
    set.on_kv_event(KvEvent{KvEvent::alloc, s, s, 1, 0});
    testing::run_seed_step(set, *a, s, s == 0 ? "prefill" : "decode", 2);
    KvStepStats st;
    st.step = s;
    st.total_blocks = 8;
    st.used_blocks = s + 1;
    st.free_blocks = 8 - (s + 1);
    set.on_kv_step(st);
  }
  runfmt::KvData kv_data = kv.data(origin);
  TraceSources src;
  src.origin_ns = origin;
  src.timeline = &timeline;
  src.kv = &kv_data;
  src.memory = &memory.samples();
  std::vector<TraceEvent> events = build_trace(src);

  auto path = test::scratch_dir("trace-json") / "trace.json";
  runfmt::write_trace(path, events, {{"run", "t"}});
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str());  // valid JSON
  ASSERT_TRUE(doc.contains("traceEvents"));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  std::vector<TraceEvent> parsed = runfmt::parse_trace(doc);
  ASSERT_EQ(parsed.size(), events.size());
  EXPECT_EQ(runfmt::check_trace(parsed), std::vector<std::string>{});

  // Units: every clock read is 1 us apart; an op range spans its begin and
  // end reads, which are consecutive in the timeline (begin is read last in
  // on_op_begin, end first in on_op_end).
  std::map<std::string, int> count;
  std::set<std::string> counters, thread_names;
  for (const TraceEvent& e : parsed) {
    count[e.cat] += 1;
    if (e.ph == 'C') counters.insert(e.name);
    if (e.ph == 'M' && e.name == "thread_name") thread_names.insert(e.args["name"]);
    if (e.cat == "op") {
      EXPECT_DOUBLE_EQ(e.dur_us, 1.0) << e.name;
      EXPECT_EQ(e.ts_us, std::floor(e.ts_us)) << "integer microseconds from a 1 us clock";
    }
  }
  EXPECT_EQ(count["step"], 3);
  EXPECT_EQ(count["phase"], 3);
  EXPECT_EQ(count["layer"], 6);
  EXPECT_EQ(count["op"], 3 * testing::seed_ops_per_step(2));
  EXPECT_TRUE(counters.count("kv blocks"));
  EXPECT_TRUE(counters.count("host memory"));
  EXPECT_TRUE(counters.count("device memory"));
  EXPECT_TRUE(thread_names.count("engine"));
  // The first op of step 0 starts after the step and is nested in it.
  const TraceEvent* step0 = nullptr;
  const TraceEvent* embed0 = nullptr;
  for (const TraceEvent& e : parsed) {
    if (e.cat == "step" && !step0) step0 = &e;
    if (e.cat == "op" && e.name == "embed" && !embed0) embed0 = &e;
  }
  ASSERT_TRUE(step0 && embed0);
  EXPECT_GE(embed0->ts_us, step0->ts_us);
  EXPECT_LE(embed0->ts_us + embed0->dur_us, step0->ts_us + step0->dur_us);
  EXPECT_EQ(step0->args["step"], 0);
}

TEST(TraceJson, KernelEventsCarryLaunchConfigAndOccupancy) {
  runfmt::KernelRow k;
  k.kernel = "gemv";
  k.source = "cupti";
  k.stream = 7;
  k.dur_us = 2;
  k.launch_config = {.grid_x = 64, .grid_y = 2, .grid_z = 1, .block_x = 128, .block_y = 1,
                     .block_z = 1, .static_smem = 2048, .regs_per_thread = 40};
  k.occupancy = runfmt::occupancy(k.launch_config, runfmt::sm90_limits());
  runfmt::KernelRow host = k;
  host.launch_config = {};
  host.occupancy.reset();
  std::vector<runfmt::KernelRow> rows = {k, host};
  TraceSources src;
  src.gpu_kernels = &rows;
  std::vector<TraceEvent> events = build_trace(src);
  std::vector<const TraceEvent*> kernels;
  for (const TraceEvent& e : events)
    if (e.cat == "kernel") kernels.push_back(&e);
  ASSERT_EQ(kernels.size(), 2u);
  const nlohmann::json& a = kernels[0]->args;
  EXPECT_EQ(a["grid"], nlohmann::json::array({64, 2, 1}));
  EXPECT_EQ(a["block"], nlohmann::json::array({128, 1, 1}));
  EXPECT_EQ(a["regs_per_thread"], 40);
  EXPECT_EQ(a["static_smem_bytes"], 2048);
  EXPECT_EQ(a["dynamic_smem_bytes"], 0);
  EXPECT_EQ(a["blocks_per_sm"], k.occupancy->blocks_per_sm);
  EXPECT_EQ(a["occupancy"], k.occupancy->occupancy);
  EXPECT_EQ(a["occupancy_limit"], k.occupancy->limit);
  EXPECT_FALSE(kernels[1]->args.contains("grid")) << "no launch config, no launch args";
  EXPECT_FALSE(kernels[1]->args.contains("occupancy"));
}

TEST(TraceJson, GraphReplaysHaveNoHostRanges) {
  g_ns = 0;
  Timeline timeline(fake_clock);
  auto a = testing::make_seed_arena();
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 2);
  testing::capture_seed_graph(timeline, *a, 2, graph);
  testing::run_graph_step(timeline, 0, graph);
  testing::run_graph_step(timeline, 1, graph);
  const size_t ops = testing::seed_ops_per_step(2);
  ASSERT_EQ(timeline.launches().size(), ops) << "the capture's ops only: replays are not re-logged";
  ASSERT_EQ(timeline.replays().size(), 2u);
  EXPECT_EQ(timeline.replays()[1].step, 1);
  EXPECT_EQ(timeline.replays()[1].num_ops, static_cast<int>(ops));
  TraceSources src;
  src.timeline = &timeline;
  std::vector<TraceEvent> events = build_trace(src);
  size_t op_ranges = 0, layer_ranges = 0, replay_marks = 0;
  for (const TraceEvent& e : events) {
    if (e.cat == "graph") {
      ++replay_marks;
      EXPECT_EQ(e.args["ops"], ops);
      EXPECT_EQ(e.dur_us, 0.0);
    }
    if (e.cat == "op") {
      ++op_ranges;
      EXPECT_EQ(e.args["graph"], "capture") << e.name;
      EXPECT_EQ(e.args["step"], -1) << "captured at start-up, outside any step";
    }
    layer_ranges += e.cat == "layer";
  }
  EXPECT_EQ(op_ranges, ops) << "the capture's host ranges only";
  EXPECT_EQ(layer_ranges, 2u);
  EXPECT_EQ(replay_marks, 2u) << "one zero-length mark per replay";
  EXPECT_EQ(runfmt::check_trace(events), std::vector<std::string>{});
  EXPECT_TRUE(host_kernel_rows(timeline, Roofline{}, 0).empty()) << "nothing ran on the host";
}

TEST(TraceJson, MalformedEventsAreOneLineErrors) {
  nlohmann::json doc = {{"traceEvents", {{{"ph", "X"}, {"name", "a"}, {"pid", 1}, {"tid", 1}}}}};
  try {
    runfmt::parse_trace(doc);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "trace.json: event 0: missing 'ts'");
  }
  EXPECT_THROW(runfmt::parse_trace(nlohmann::json{{"events", 1}}), Error);
}

// Overlapped decode steps (docs/architecture.md, "Overlapped steps"): a
// step's range covers only its planning and launches, and its tokens are
// collected in the next step() call. metrics.json charges each step the time
// from the previous collection to its own, so per-step times and decode
// tokens/s are those of the pipelined run, not of the launches. Random
// durations; the expected values are computed from the event times here.
TEST(StepShare, OverlappedStepsAreChargedFromCollectionToCollection) {
  uint64_t now = 1'000'000;
  static uint64_t* clock_now = nullptr;
  clock_now = &now;
  Timeline t(+[] { return *clock_now; });
  std::mt19937_64& rng = test::rng();
  auto us = [&](int lo, int hi) { return static_cast<uint64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)) * 1000; };
  auto info = [](int64_t step, const char* phase, int tokens) {
    StepInfo s;
    s.step = step;
    s.phase = phase;
    s.num_tokens = tokens;
    s.num_decode_seqs = std::string(phase) == "decode" ? tokens : 0;
    s.num_prefill_seqs = std::string(phase) == "prefill" ? 1 : 0;
    return s;
  };
  // Step 0: a synchronous prefill (collected inside its range).
  t.on_step_begin(info(0, "prefill", 16));
  now += us(200, 400);
  t.on_step_collected(0);
  const uint64_t c0 = now;
  now += us(5, 20);
  t.on_step_end(info(0, "prefill", 16));
  const uint64_t begin0 = 1'000'000;
  // Steps 1..n: overlapped decodes of 8 rows; step k+1 is launched before
  // step k is collected.
  const int n = 6;
  std::vector<uint64_t> collected(n + 1, 0);
  collected[0] = c0;
  now += us(1, 10);
  t.on_step_begin(info(1, "decode", 8));
  const uint64_t begin1 = now;  // after c0: step 1's share starts at its begin
  now += us(10, 30);
  t.on_step_end(info(1, "decode", 8));
  for (int k = 1; k <= n; ++k) {
    if (k < n) {  // launch k + 1, then collect k
      now += us(1, 5);
      t.on_step_begin(info(k + 1, "decode", 8));
      now += us(10, 30);
      t.on_step_end(info(k + 1, "decode", 8));
    }
    now += us(500, 900);  // waiting for step k on the device
    t.on_step_collected(k);
    collected[k] = now;
  }
  EXPECT_TRUE(t.errors().empty()) << t.errors().front();
  const nlohmann::json m = compute_metrics({}, &t);
  double decode_s = 0;
  std::vector<double> decode_ms;
  for (int k = 1; k <= n; ++k) {
    const uint64_t from = k == 1 ? begin1 : collected[k - 1];
    decode_s += static_cast<double>(collected[k] - from) * 1e-9;
    decode_ms.push_back(static_cast<double>(collected[k] - from) * 1e-6);
  }
  const auto& phases = m["steps"]["phases"];
  EXPECT_EQ(phases["decode"]["count"], n);
  EXPECT_NEAR(phases["decode"]["time_s"].get<double>(), decode_s, 1e-12);
  EXPECT_NEAR(m["decode_tokens_per_s"].get<double>(), 8.0 * n / decode_s, 1e-6 * 8.0 * n / decode_s);
  EXPECT_NEAR(phases["decode"]["step_ms"]["max"].get<double>(),
              *std::max_element(decode_ms.begin(), decode_ms.end()), 1e-9);
  // The synchronous prefill keeps its collection as its end.
  EXPECT_NEAR(phases["prefill"]["time_s"].get<double>(), static_cast<double>(c0 - begin0) * 1e-9, 1e-12);
  // Each decode range alone (planning and launches) is far shorter: the old,
  // wrong accounting would give at most 30 us per step.
  EXPECT_GT(phases["decode"]["step_ms"]["p50"].get<double>(), 0.4);
  // A step never collected (an error mid-step) is charged its range.
  t.on_step_begin(info(n + 1, "decode", 8));
  now += 7000;
  t.on_step_end(info(n + 1, "decode", 8));
  EXPECT_EQ(step_share_ns(t.steps().back(), collected[n]), 7000u);
  t.on_step_collected(99);
  EXPECT_EQ(t.errors().size(), 1u) << "a collection of a step never begun is a hook error";
}

}  // namespace
}  // namespace lantern::harness
