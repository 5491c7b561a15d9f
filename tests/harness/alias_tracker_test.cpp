// Alias tracker on synthetic op sequences: the seed's plan is clean, planted
// wrong plans are caught with both views, the op and the step in the report.
#include "harness/alias_tracker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "tests/harness/seed_plan.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;
using testing::make_seed_arena;
using testing::Plan;
using testing::run_seed_step;

TEST(AliasTracker, SeedPlanIsClean) {
  auto a = make_seed_arena(Plan::seed);
  AliasTracker t;
  t.on_arena(a->arena);
  run_seed_step(t, *a, 0, "prefill", 3);
  for (int s = 1; s < 6; ++s) run_seed_step(t, *a, s, "decode", 3);
  t.finish();
  EXPECT_EQ(t.violation_count(), 0);
  EXPECT_TRUE(t.violations().empty());
  EXPECT_EQ(t.warning_count(), 0) << (t.warnings().empty() ? "" : t.warnings()[0].message);
  EXPECT_TRUE(t.errors().empty());
  // Decode steps repeat one access pattern: two patterns for six steps.
  auto patterns = t.patterns();
  ASSERT_EQ(patterns.size(), 2u);
  ASSERT_EQ(t.step_patterns().size(), 6u);
  EXPECT_EQ(t.step_patterns()[0], (std::pair<int64_t, int>{0, 0}));
  for (int s = 1; s < 6; ++s) EXPECT_EQ(t.step_patterns()[s].second, 1);
  EXPECT_EQ(patterns[0].ops.size(), static_cast<size_t>(testing::seed_ops_per_step(3)));
}

TEST(AliasTracker, LiveIntervalsFollowWritesAndLastReads) {
  auto a = make_seed_arena(Plan::seed);
  AliasTracker t;
  t.on_arena(a->arena);
  run_seed_step(t, *a, 0, "decode", 1);
  auto patterns = t.patterns();
  ASSERT_EQ(patterns.size(), 1u);
  const auto& p = patterns[0];
  // Op indices: 0 embed, 1 attn_norm, 2 q_proj, 3 k_proj, 4 v_proj, 5 rope,
  // 6 kv_write, 7 attention_decode, 8 o_proj, ...
  auto intervals_of = [&](ViewId v) {
    std::vector<std::pair<int, int>> out;
    for (const auto& l : p.intervals)
      if (l.view == v) out.emplace_back(l.first_write, l.last_read);
    return out;
  };
  EXPECT_EQ(intervals_of(a->q), (std::vector<std::pair<int, int>>{{2, 5}, {5, 7}}));
  EXPECT_EQ(intervals_of(a->attn_out), (std::vector<std::pair<int, int>>{{7, 8}}));
  EXPECT_EQ(p.ops[7].op, "attention_decode");
  EXPECT_EQ(p.ops[7].layer, 0);
}

TEST(AliasTracker, PlantedWrongAliasIsCaughtWithBothViewsOpAndStep) {
  auto a = make_seed_arena(Plan::up_over_gate);
  AliasTracker t;
  t.on_arena(a->arena);
  run_seed_step(t, *a, 7, "prefill", 2);
  run_seed_step(t, *a, 8, "decode", 2);
  run_seed_step(t, *a, 9, "decode", 2);
  t.finish();
  ASSERT_EQ(t.violations().size(), 1u) << "one distinct clobber, repeated per layer and step";
  EXPECT_EQ(t.violation_count(), 6);  // 2 layers x 3 steps
  const runfmt::AliasIssue& v = t.violations()[0];
  EXPECT_EQ(v.kind, "clobber");
  EXPECT_EQ(v.step, 7);
  EXPECT_EQ(v.view, "up");
  EXPECT_EQ(v.victim, "gate");
  EXPECT_EQ(v.op.op, "up_proj");
  EXPECT_EQ(v.op.layer, 0);
  EXPECT_EQ(v.victim_write.op, "gate_proj");
  EXPECT_EQ(v.victim_read.op, "swiglu");
  EXPECT_EQ(v.occurrences, 6);
  EXPECT_THAT(v.message, HasSubstr("step 7"));
  EXPECT_THAT(v.message, HasSubstr("'up_proj'"));
  EXPECT_THAT(v.message, HasSubstr("view 'up'"));
  EXPECT_THAT(v.message, HasSubstr("view 'gate'"));
  EXPECT_THAT(v.message, HasSubstr("'swiglu'"));
  EXPECT_LT(v.overlap_begin, v.overlap_end);
}

TEST(AliasTracker, PartialOverlapReportsTheSharedBytes) {
  auto a = make_seed_arena(Plan::k_over_q);
  AliasTracker t;
  t.on_arena(a->arena);
  run_seed_step(t, *a, 3, "decode", 1);
  ASSERT_EQ(t.violations().size(), 1u);
  const runfmt::AliasIssue& v = t.violations()[0];
  EXPECT_EQ(v.view, "k");
  EXPECT_EQ(v.victim, "q");
  EXPECT_EQ(v.op.op, "k_proj");
  EXPECT_EQ(v.victim_write.op, "q_proj");
  EXPECT_EQ(v.victim_read.op, "rope");
  const ArenaView& k = a->arena.views()[a->k];
  const uint64_t q_begin = a->arena.buffers()[a->arena.views()[a->q].buffer].offset;
  EXPECT_EQ(v.overlap_begin, q_begin);
  EXPECT_EQ(v.overlap_end, q_begin + k.bytes);
}

TEST(AliasTracker, InPlaceReadWriteInOneOpIsAllowed) {
  AliasTracker t;
  t.set_views({{"a", 0, 100}, {"b", 0, 100}});
  const ViewId a = 0, b = 1;
  auto op = [&](const char* name, std::vector<ViewId> r, std::vector<ViewId> w) {
    testing::seed_op(t, name, -1, kernels::Family::attention_decode, r, w, [] {});
  };
  t.on_step_begin(testing::step_info(0, "decode", 1, 1));
  op("produce_a", {}, {a});
  op("in_place", {a}, {b});  // reads a, writes b over it in the same op
  op("consume_b", {b}, {});
  t.on_step_end(testing::step_info(0, "decode", 1, 1));
  EXPECT_EQ(t.violation_count(), 0);
  // The same plan with the read one op later is a clobber.
  t.on_step_begin(testing::step_info(1, "decode", 1, 1));
  op("produce_a", {}, {a});
  op("write_b", {}, {b});
  op("read_a", {a}, {});
  t.on_step_end(testing::step_info(1, "decode", 1, 1));
  ASSERT_EQ(t.violation_count(), 1);
  EXPECT_EQ(t.violations()[0].step, 1);
  EXPECT_EQ(t.violations()[0].op.op, "write_b");
}

TEST(AliasTracker, RewrittenVictimIsNotStillNeeded) {
  AliasTracker t;
  t.set_views({{"a", 0, 64}, {"b", 32, 96}});
  t.on_step_begin(testing::step_info(0, "decode", 1, 1));
  auto op = [&](const char* name, std::vector<ViewId> r, std::vector<ViewId> w) {
    testing::seed_op(t, name, 0, kernels::Family::gemm, r, w, [] {});
  };
  op("write_a", {}, {0});
  op("write_b", {}, {1});     // clobbers a's bytes [32, 64) ...
  op("rewrite_a", {}, {0});   // ... but a is written again before anyone reads it
  op("read_a", {0}, {});
  op("read_b", {1}, {});      // b was clobbered by rewrite_a while still needed
  t.on_step_end(testing::step_info(0, "decode", 1, 1));
  ASSERT_EQ(t.violations().size(), 1u);
  EXPECT_EQ(t.violations()[0].op.op, "rewrite_a");
  EXPECT_EQ(t.violations()[0].victim, "b");
  EXPECT_EQ(t.violations()[0].overlap_begin, 32u);
  EXPECT_EQ(t.violations()[0].overlap_end, 64u);
}

TEST(AliasTracker, StaleReadIsAWarning) {
  auto a = make_seed_arena(Plan::seed);
  AliasTracker t;
  t.on_arena(a->arena);
  t.on_step_begin(testing::step_info(4, "decode", 1, 1));
  testing::seed_op(t, "final_norm", -1, kernels::Family::rmsnorm, {a->x}, {a->logits_in}, [] {});
  t.on_step_end(testing::step_info(4, "decode", 1, 1));
  EXPECT_EQ(t.violation_count(), 0);
  ASSERT_EQ(t.warnings().size(), 1u);
  EXPECT_EQ(t.warnings()[0].kind, "stale_read");
  EXPECT_EQ(t.warnings()[0].view, "x");
  EXPECT_THAT(t.warnings()[0].message, HasSubstr("step 4"));
}

TEST(AliasTracker, UnknownViewIdIsAnError) {
  AliasTracker t;
  t.set_views({{"a", 0, 64}});
  t.on_step_begin(testing::step_info(0, "decode", 1, 1));
  testing::seed_op(t, "bad", 0, kernels::Family::gemm, {5}, {0}, [] {});
  t.on_step_end(testing::step_info(0, "decode", 1, 1));
  ASSERT_EQ(t.errors().size(), 1u);
  EXPECT_THAT(t.errors()[0], HasSubstr("view id 5"));
}

TEST(AliasTracker, OpsOutsideStepsAreAnalysedAsStepMinusOne) {
  auto a = make_seed_arena(Plan::up_over_gate);
  AliasTracker t;
  t.on_arena(a->arena);
  run_seed_step(t, *a, 0, "decode", 1, [] {}, /*step_hooks=*/false);
  t.finish();
  ASSERT_EQ(t.violations().size(), 1u);
  EXPECT_EQ(t.violations()[0].step, -1);
}

TEST(AliasTracker, GraphCaptureIsSkippedAndReplaysAreChecked) {
  auto a = make_seed_arena(Plan::up_over_gate);
  AliasTracker t;
  t.on_arena(a->arena);
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 2);
  testing::capture_seed_graph(t, *a, 2, graph);
  testing::run_graph_step(t, 0, graph);
  testing::run_graph_step(t, 1, graph);
  t.finish();
  // Only the replays count: 2 layers x 2 steps, and both steps share one
  // pattern (the captured ops did not double the first step).
  EXPECT_EQ(t.violation_count(), 4);
  ASSERT_EQ(t.patterns().size(), 1u);
  EXPECT_EQ(t.patterns()[0].ops.size(), static_cast<size_t>(testing::seed_ops_per_step(2)));
}

TEST(AliasTracker, PureReplayStepsReuseTheGraphsPatternAndKeepCounting) {
  auto a = make_seed_arena(Plan::up_over_gate);
  AliasTracker t;
  t.on_arena(a->arena);
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 2);
  testing::capture_seed_graph(t, *a, 2, graph);
  testing::run_graph_step(t, 0, graph);
  for (int s = 1; s < 10; ++s) testing::run_graph_step(t, s, graph);
  t.finish();
  EXPECT_EQ(t.violation_count(), 2 * 10) << "2 layers x 10 replayed steps";
  ASSERT_EQ(t.patterns().size(), 1u);
  ASSERT_EQ(t.step_patterns().size(), 10u);
  for (int s = 0; s < 10; ++s) EXPECT_EQ(t.step_patterns()[s], (std::pair<int64_t, int>{s, 0}));
  ASSERT_EQ(t.violations().size(), 1u);
  EXPECT_EQ(t.violations()[0].occurrences, 20);
}

TEST(AliasTracker, ReplayPlusOtherOpsInOneStepIsAnalysedInFull) {
  auto a = make_seed_arena(Plan::seed);
  AliasTracker t;
  t.on_arena(a->arena);
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 1);
  testing::capture_seed_graph(t, *a, 1, graph);
  testing::run_graph_step(t, 0, graph);  // learns the pattern
  // Step 1: the replay, then an eager op that clobbers x while nothing reads
  // it any more (clean), then one that reads logits (the replay's output).
  t.on_step_begin(testing::step_info(1, "decode", 2, 2));
  t.on_graph_replay(graph.replay());
  testing::seed_op(t, "extra", -1, kernels::Family::argmax, {a->logits}, {a->xn}, [] {});
  t.on_step_end(testing::step_info(1, "decode", 2, 2));
  // Step 2: an eager op first, then the replay.
  t.on_step_begin(testing::step_info(2, "decode", 2, 2));
  testing::seed_op(t, "pre", -1, kernels::Family::embedding, {}, {a->x}, [] {});
  t.on_graph_replay(graph.replay());
  t.on_step_end(testing::step_info(2, "decode", 2, 2));
  // Step 3: a pure replay again reuses the learned pattern.
  testing::run_graph_step(t, 3, graph);
  t.finish();
  auto patterns = t.patterns();
  ASSERT_EQ(patterns.size(), 3u);
  const size_t n = testing::seed_ops_per_step(1);
  EXPECT_EQ(patterns[0].ops.size(), n);
  EXPECT_EQ(patterns[1].ops.size(), n + 1);
  EXPECT_EQ(patterns[1].ops.back().op, "extra");
  EXPECT_EQ(patterns[2].ops.size(), n + 1);
  EXPECT_EQ(patterns[2].ops.front().op, "pre");
  ASSERT_EQ(t.step_patterns().size(), 4u);
  EXPECT_EQ(t.step_patterns()[3], (std::pair<int64_t, int>{3, 0}));
  EXPECT_EQ(t.violation_count(), 0);
}

// The default on_graph_replay replays the layer and op hooks in order.
TEST(Observer, DefaultGraphReplayHookExpandsLayersAndOpsInOrder) {
  struct Log : Observer {
    std::vector<std::string> events;
    void on_layer_begin(int l) override { events.push_back(strformat("L%d", l)); }
    void on_layer_end(int l) override { events.push_back(strformat("/L%d", l)); }
    void on_op_begin(const OpInfo& op) override {
      EXPECT_EQ(op.graph, OpInfo::kReplay);
      events.push_back(op.op);
    }
    void on_op_end(const OpInfo& op) override { events.push_back(std::string("/") + op.op); }
  } log;
  auto a = make_seed_arena(Plan::seed);
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 2);
  log.on_graph_replay(graph.replay());
  // What run_seed_ops emits directly, with the same layer brackets.
  Log direct;
  testing::run_seed_ops(direct, *a, "decode", 2, [] {}, OpInfo::kReplay);
  EXPECT_EQ(log.events, direct.events);
  EXPECT_EQ(log.events.front(), "embed");
  EXPECT_EQ(log.events[2], "L0");
  EXPECT_EQ(log.events.back(), "/argmax");
}

}  // namespace
}  // namespace lantern::harness
