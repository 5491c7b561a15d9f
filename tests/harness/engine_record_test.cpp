// End to end on the CPU backend: the engine runs the tiny synthetic model
// under a recording Session, and the run directory is checked through the
// reader: the seed's aliases verified clean, every KV block returned, every
// op timed and attributed, a well-formed trace.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/synth.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"
#include "harness/session.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

const std::filesystem::path& tiny_model() {
  static std::filesystem::path dir = [] {
    auto d = test::scratch_dir("harness-tiny-model");
    SynthOptions opt;
    opt.seed = 77;
    opt.with_tokenizer = false;
    write_synthetic_model(synth_preset("tiny"), d, opt);
    return d;
  }();
  return dir;
}

// Every op host-timed and attributed; costs from the registry. head_gather
// (the pruned last layer's row copy) is an engine-side op: no registry family,
// its bytes from the engine.
void expect_ops_host_timed_and_attributed(const runfmt::Run& run) {
  ASSERT_FALSE(run.kernels.empty());
  int head_gathers = 0;
  for (const auto& k : run.kernels) {
    EXPECT_EQ(k.source, "host");
    EXPECT_GE(k.launch, 0);
    if (k.op == "head_gather") {
      ++head_gathers;
      EXPECT_TRUE(k.family.empty());
      EXPECT_GT(k.bytes, 0);
    } else {
      EXPECT_FALSE(k.family.empty()) << k.op;
    }
    EXPECT_GE(k.step, 0);
  }
  EXPECT_GT(head_gathers, 0) << "the prompts' steps prune their last layer";
}

TEST(EngineRecord, CpuRunDirectoryIsCompleteAndClean) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  auto dir = test::scratch_dir("engine-record") / "tiny-cpu";
  HarnessOptions ho;
  ho.record_dir = dir;
  ho.print_summary = false;
  Session session(ho);

  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions eo;
  eo.backend = kernels::Backend::cpu;
  eo.limits.max_context = std::min(256, cfg.max_position_embeddings);
  eo.limits.max_seqs = 4;
  session.apply(eo);
  Engine engine(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cpu), eo);
  nlohmann::json config = engine.describe();
  config["request"] = {{"max_new_tokens", 6}};
  session.set_config(config);

  const int kRequests = 3;
  for (int i = 0; i < kRequests; ++i) {
    Request r;
    for (int t = 0; t < 5 + 7 * i; ++t) r.prompt.push_back((37 * t + 11 * i) % cfg.vocab_size);
    r.max_new_tokens = 6;
    r.stop_at_eos = false;
    r.tag = std::string(1, 'r') + std::to_string(i);
    engine.submit(std::move(r));
  }
  engine.run_until_idle();
  for (const RequestResult& r : engine.take_finished()) session.on_result(r, "");
  session.finish(engine);
  EXPECT_TRUE(session.problems().empty()) << session.problems()[0];

  runfmt::Run run = runfmt::RunReader::open(dir);
  EXPECT_TRUE(run.manifest.complete);
  EXPECT_EQ(run.manifest.backend, "cpu");
  EXPECT_EQ(run.manifest.json["config"]["request"]["max_new_tokens"], 6);
  EXPECT_EQ(run.manifest.json["config"]["backend"], "cpu");

  // The seed's two aliases (q/attn_out, o_out/mlp_down) verified at run time.
  std::set<std::string> views;
  for (const auto& v : run.memory.views) views.insert(v.name);
  for (const char* v : {"q", "attn_out", "o_out", "mlp_down"}) EXPECT_TRUE(views.count(v)) << v;
  EXPECT_EQ(run.memory.violation_count, 0)
      << (run.memory.violations.empty() ? "" : run.memory.violations[0].message);
  EXPECT_EQ(run.memory.warning_count, 0)
      << (run.memory.warnings.empty() ? "" : run.memory.warnings[0].message);
  EXPECT_FALSE(run.memory.patterns.empty());
  EXPECT_EQ(static_cast<int64_t>(run.memory.step_patterns.size()), engine.steps_run());
  EXPECT_TRUE(run.memory.errors.empty()) << run.memory.errors[0];
  std::set<std::string> owners;
  for (const auto& a : run.memory.allocations) owners.insert(a.owner);
  for (const char* o : {"weights", "arena", "kv_pool"}) EXPECT_TRUE(owners.count(o)) << o;

  // KV: blocks came and all went back.
  EXPECT_FALSE(run.kv.events.empty());
  EXPECT_TRUE(run.kv.leaked_blocks.empty());
  EXPECT_TRUE(run.kv.errors.empty()) << run.kv.errors[0];
  EXPECT_GT(run.kv.peak_used_blocks, 0);
  EXPECT_EQ(run.kv.total_blocks, engine.memory_budget().kv_blocks);
  EXPECT_EQ(run.kv.block_size, engine.limits().kv_block_size);
  EXPECT_EQ(static_cast<int64_t>(run.kv.steps.size()), engine.steps_run());
  EXPECT_EQ(run.kv.steps.back().used_blocks, 0);

  expect_ops_host_timed_and_attributed(run);
  const bool any_bytes = std::any_of(run.kernels.begin(), run.kernels.end(),
                                     [](const runfmt::KernelRow& k) { return k.bytes > 0; });
  EXPECT_TRUE(any_bytes) << "registry costs reach kernels.csv";

  EXPECT_EQ(run.outputs.size(), static_cast<size_t>(kRequests));
  for (const auto& o : run.outputs) EXPECT_EQ(o.tokens.size(), 6u);
  EXPECT_EQ(run.metrics["generated_tokens"], 6 * kRequests);
  EXPECT_EQ(run.metrics["steps"]["count"], engine.steps_run());
  // Overlapped decode (the default): the decode steps launched ahead, as the engine counted them.
  const nlohmann::json& overlap = run.metrics["steps"]["overlap"];
  EXPECT_EQ(overlap["mode"], "on");
  EXPECT_EQ(overlap["continuations"], engine.overlap_stats().continuations);
  EXPECT_GT(overlap["continuations"].get<int64_t>(), 0);
  EXPECT_LT(overlap["continuations"].get<int64_t>(), engine.steps_run());
  EXPECT_EQ(overlap["discarded_rows"], 0) << "no EOS stops in this run";
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

}  // namespace
}  // namespace lantern::harness
