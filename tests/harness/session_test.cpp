// Session on the CPU backend, driven through synthetic hooks: every file of
// the run directory is written and reads back through RunReader.
#include "harness/session.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"

#include "harness/alias_tracker.h"
#include "harness/manifest.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"
#include "tests/harness/seed_plan.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;

RequestResult result(int64_t id, int n_tokens, double submit, double first, double finish) {
  RequestResult r;
  r.id = id;
  r.tag = "req";
  r.tag += std::to_string(id);
  r.prompt = {128000, 10, 11};
  for (int i = 0; i < n_tokens; ++i) r.tokens.push_back(100 + i);
  r.finish_reason = "length";
  r.submit_s = submit;
  r.first_token_s = first;
  r.finish_s = finish;
  return r;
}

// Replays a small run: allocations, arena, one prefill and `decodes` decode
// steps with KV blocks, then frees.
void replay(Observer& obs, const testing::SeedArena& a, int decodes) {
  obs.on_alloc(AllocEvent{"weights", "weight block", 0x100000, 0x10000, kernels::Backend::cpu, false});
  obs.on_alloc(AllocEvent{"arena", "activation arena", 0x200000, a.arena.total_bytes(),
                          kernels::Backend::cpu, false});
  obs.on_arena(a.arena);
  obs.on_alloc(AllocEvent{"kv_pool", "KV blocks", 0x400000, 0x8000, kernels::Backend::cpu, false});
  for (int s = 0; s <= decodes; ++s) {
    if (s == 0)
      for (int layer = 0; layer < 2; ++layer)
        obs.on_kv_event(KvEvent{KvEvent::alloc, 0, layer, 1, layer});
    testing::run_seed_step(obs, a, s, s == 0 ? "prefill" : "decode", 2);
  }
  for (int layer = 0; layer < 2; ++layer)
    obs.on_kv_event(KvEvent{KvEvent::free, decodes, layer, 1, layer});
}

EngineSummary cpu_summary() {
  EngineSummary s;
  s.backend = kernels::Backend::cpu;
  s.memory_budget = {{"weights", 0x10000}, {"kv_pool", 0x8000}};
  s.kv_blocks = 16;
  s.kv_block_size = 16;
  s.steps = 4;
  s.describe = {{"backend", "cpu"}};
  return s;
}

TEST(Session, RecordsACompleteRunDirectory) {
  setenv("LANTERN_SESSION_TEST_KNOB", "knob-7", 1);  // recorded in the manifest's "environment"
  auto dir = test::scratch_dir("session-cpu") / "run-a";
  HarnessOptions o;
  o.record_dir = dir;
  o.print_summary = false;
  Session session(o);
  EngineOptions eo;
  session.apply(eo);
  ASSERT_NE(eo.observer, nullptr);
  session.set_config({{"model", "synthetic"}, {"max_new_tokens", 4}});
  session.set_command({"lantern", "generate", "--record", dir.string()});
  auto a = testing::make_seed_arena();
  replay(*eo.observer, *a, 3);
  session.on_result(result(0, 4, 0.0, 0.010, 0.040), "abcd", "hello");
  session.on_result(result(1, 1, 0.0, 0.020, 0.020), "e");
  session.finish(cpu_summary());
  EXPECT_TRUE(session.problems().empty()) << session.problems()[0];

  runfmt::Run run = runfmt::RunReader::open(dir);
  const nlohmann::json& m = run.manifest.json;
  EXPECT_EQ(run.manifest.name, "run-a");
  EXPECT_EQ(run.manifest.backend, "cpu");
  EXPECT_TRUE(run.manifest.complete);
  EXPECT_EQ(m["config"]["model"], "synthetic");
  EXPECT_EQ(m["command"][1], "generate");
  EXPECT_TRUE(m["git"]["commit"].is_string());
  EXPECT_FALSE(m["git"]["commit"].get<std::string>().empty());
  EXPECT_TRUE(m["git"].contains("dirty"));
  EXPECT_TRUE(m["build"]["type"].is_string());
  EXPECT_EQ(m["build"]["instrumentation"], LANTERN_INSTRUMENTATION != 0);
  EXPECT_FALSE(m["host"]["hostname"].get<std::string>().empty());
  EXPECT_TRUE(m["environment"].is_object());
  EXPECT_EQ(m["environment"].value("LANTERN_SESSION_TEST_KNOB", ""), "knob-7") << "the process's LANTERN_* knobs";
  EXPECT_FALSE(m["environment"].contains("PATH")) << "only LANTERN_* variables";
  unsetenv("LANTERN_SESSION_TEST_KNOB");
  EXPECT_TRUE(m["gpu"].is_null());
  EXPECT_TRUE(m["roofline"].is_null());
  EXPECT_EQ(m["harness"]["kernel_timing"], "host");
  EXPECT_TRUE(m["versions"]["cublas"].is_string());

  // metrics.json
  EXPECT_EQ(run.metrics["requests"], 2);
  EXPECT_EQ(run.metrics["generated_tokens"], 5);
  EXPECT_NEAR(run.metrics["tokens_per_s"].get<double>(), 5 / 0.040, 1e-9);
  EXPECT_NEAR(run.metrics["ttft_s"]["max"].get<double>(), 0.020, 1e-12);
  EXPECT_NEAR(run.metrics["tpot_s"]["p50"].get<double>(), 0.010, 1e-12);
  EXPECT_EQ(run.metrics["steps"]["count"], 4);
  EXPECT_EQ(run.metrics["steps"]["phases"]["decode"]["count"], 3);
  EXPECT_GT(run.metrics["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(run.metrics["harness"]["alias_violations"], 0);
  EXPECT_EQ(run.metrics["memory"]["kv_peak_used_blocks"], 2);

  // kernels.csv: one host-timed row per op, all attributed.
  ASSERT_EQ(run.kernels.size(), static_cast<size_t>(4 * testing::seed_ops_per_step(2)));
  for (const runfmt::KernelRow& k : run.kernels) {
    EXPECT_EQ(k.source, "host");
    EXPECT_FALSE(k.op.empty());
    EXPECT_FALSE(k.family.empty());
    EXPECT_GE(k.dur_us, 0);
  }
  // memory.json: allocations, arena views, alias report.
  ASSERT_EQ(run.memory.allocations.size(), 3u);
  EXPECT_EQ(run.memory.allocations[2].owner, "kv_pool");
  EXPECT_EQ(run.memory.views.size(), a->arena.views().size());
  EXPECT_EQ(run.memory.violation_count, 0);
  EXPECT_EQ(run.memory.patterns.size(), 2u);
  EXPECT_EQ(run.memory.step_patterns.size(), 4u);
  // kv.json: blocks all returned.
  EXPECT_EQ(run.kv.events.size(), 4u);
  EXPECT_TRUE(run.kv.leaked_blocks.empty());
  EXPECT_TRUE(run.kv.errors.empty());
  EXPECT_EQ(run.kv.block_size, 16);
  EXPECT_EQ(run.kv.total_blocks, 16);
  EXPECT_EQ(run.kv.steps.size(), 4u);
  // outputs.jsonl
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[0].text, "abcd");
  EXPECT_EQ(run.outputs[0].prompt_text, "hello");
  EXPECT_NEAR(run.outputs[0].tpot_s, 0.010, 1e-12);
  // trace.json
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

TEST(Session, PlantedWrongPlanIsReportedInTheRun) {
  auto dir = test::scratch_dir("session-wrong-plan");
  HarnessOptions o;
  o.record_dir = dir;
  o.print_summary = false;
  Session session(o);
  auto a = testing::make_seed_arena(testing::Plan::up_over_gate);
  replay(*session.observer(), *a, 2);
  session.finish(cpu_summary());
  ASSERT_FALSE(session.problems().empty());
  EXPECT_THAT(session.problems()[0], HasSubstr("alias violation"));
  runfmt::Run run = runfmt::RunReader::open(dir);
  ASSERT_EQ(run.memory.violations.size(), 1u);
  EXPECT_EQ(run.memory.violations[0].view, "up");
  EXPECT_EQ(run.memory.violations[0].victim, "gate");
  EXPECT_EQ(run.memory.violation_count, 6);  // 2 layers x 3 steps
  EXPECT_EQ(run.metrics["harness"]["alias_violations"], 6);
}

TEST(Session, RefusesADirectoryThatHoldsARun) {
  auto dir = test::scratch_dir("session-twice");
  HarnessOptions o;
  o.record_dir = dir;
  o.print_summary = false;
  {
    Session first(o);
    first.finish(cpu_summary());
  }
  try {
    Session second(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("already holds a run"));
  }
}

TEST(Session, UnfinishedSessionWritesAnIncompleteRun) {
  auto dir = test::scratch_dir("session-unfinished");
  HarnessOptions o;
  o.record_dir = dir;
  o.print_summary = false;
  {
    Session session(o);
    auto a = testing::make_seed_arena();
    replay(*session.observer(), *a, 1);
  }  // destroyed without finish(), e.g. by an exception
  runfmt::Run run = runfmt::RunReader::open(dir);
  EXPECT_FALSE(run.manifest.complete);
  EXPECT_EQ(run.kernels.size(), static_cast<size_t>(2 * testing::seed_ops_per_step(2)));
}

TEST(Session, HarnessOffAttachesNothingButStillRecordsOutputs) {
  auto dir = test::scratch_dir("session-off");
  HarnessOptions o;
  o.record_dir = dir;
  o.enabled = false;
  o.print_summary = false;
  Session session(o);
  EngineOptions eo;
  session.apply(eo);
  EXPECT_EQ(eo.observer, nullptr);
  EXPECT_EQ(session.observer(), nullptr);
  session.on_result(result(0, 3, 0, 0.1, 0.3), "xyz");
  session.finish(cpu_summary());
  runfmt::Run run = runfmt::RunReader::open(dir);
  EXPECT_EQ(run.manifest.json["harness"]["enabled"], false);
  EXPECT_EQ(run.manifest.json["harness"]["kernel_timing"], "none");
  EXPECT_TRUE(run.kernels.empty());
  EXPECT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.metrics["generated_tokens"], 3);
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

TEST(Session, WithoutRecordDirChecksButWritesNothing) {
  HarnessOptions o;
  o.print_summary = false;
  Session session(o);
  EXPECT_FALSE(session.recording());
  auto a = testing::make_seed_arena(testing::Plan::k_over_q);
  replay(*session.observer(), *a, 1);
  session.finish(cpu_summary());
  ASSERT_NE(session.alias(), nullptr);
  EXPECT_EQ(session.alias()->violation_count(), 4);  // 2 layers x 2 steps
  EXPECT_FALSE(session.problems().empty());
}

TEST(Session, ProfileStepsReachTheEngineOptions) {
  HarnessOptions o;
  o.profile_first = 10;
  o.profile_last = 20;
  o.print_summary = false;
  Session session(o);
  EngineOptions eo;
  session.apply(eo);
  EXPECT_EQ(eo.profile_first_step, 10);
  EXPECT_EQ(eo.profile_last_step, 20);
  session.finish(cpu_summary());
}

// A rerun sets the recorded LANTERN_* knobs before anything reads them: a
// missing one is set, a different one takes the recorded value (with a note),
// one set here but not recorded is kept (with a note).
TEST(Session, RerunAppliesTheRecordedEnvironment) {
  setenv("LANTERN_ENV_TEST_A", "here", 1);
  setenv("LANTERN_ENV_TEST_C", "extra", 1);
  unsetenv("LANTERN_ENV_TEST_B");
  const nlohmann::json recorded = {{"LANTERN_ENV_TEST_A", "recorded"}, {"LANTERN_ENV_TEST_B", "2"}};
  std::vector<std::string> notes;  // about this test's variables (the environment may hold other LANTERN_* ones)
  for (const std::string& n : apply_recorded_environment(recorded))
    if (n.find("LANTERN_ENV_TEST_") != std::string::npos) notes.push_back(n);
  EXPECT_STREQ(std::getenv("LANTERN_ENV_TEST_A"), "recorded");
  EXPECT_STREQ(std::getenv("LANTERN_ENV_TEST_B"), "2");
  EXPECT_STREQ(std::getenv("LANTERN_ENV_TEST_C"), "extra");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("LANTERN_ENV_TEST_A=recorded (recorded) vs here"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("LANTERN_ENV_TEST_C=extra is set here but was not recorded"), std::string::npos) << notes[1];
  EXPECT_EQ(lantern_environment().value("LANTERN_ENV_TEST_B", ""), "2");
  EXPECT_TRUE(apply_recorded_environment(lantern_environment()).empty()) << "all match: no notes";
  for (const char* n : {"LANTERN_ENV_TEST_A", "LANTERN_ENV_TEST_B", "LANTERN_ENV_TEST_C"}) unsetenv(n);
}

}  // namespace
}  // namespace lantern::harness
