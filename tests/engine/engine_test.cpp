// End-to-end engine tests on the CPU reference backend with the tiny
// synthetic model: determinism, prefill-then-decode == re-prefill, chunked
// prefill, batching and preemption invariance, and bad requests (the
// overlapped decode and thread safety: engine_overlap_test.cpp).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

using test::make_cpu_engine;
using test::run_all;
using test::tiny_engine_model;

TEST(EngineCpu, GreedyGenerationIsDeterministicAndNonDegenerate) {
  auto e = make_cpu_engine();
  Request r;
  r.prompt = test::random_token_ids(9);
  r.max_new_tokens = 24;
  r.stop_at_eos = false;
  auto a = run_all(*e, {r});
  auto b = run_all(*e, {r});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].tokens.size(), 24u);
  EXPECT_EQ(a[0].finish_reason, "length");
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  // Random weights fall into repetition loops, but what comes first must depend
  // on the prompt.
  std::set<int32_t> first_tokens;
  for (int i = 0; i < 4; ++i) {
    Request q;
    q.prompt = test::random_token_ids(5);
    q.max_new_tokens = 1;
    first_tokens.insert(run_all(*e, {q})[0].tokens[0]);
  }
  EXPECT_GE(first_tokens.size(), 3u) << "next-token choice ignores the prompt";
}

TEST(EngineCpu, PrefillThenDecodeEqualsReprefillAtEveryStep) {
  auto e = make_cpu_engine();
  Request r;
  r.prompt = test::random_token_ids(13);
  r.max_new_tokens = 20;
  r.stop_at_eos = false;
  auto gen = run_all(*e, {r});
  std::vector<int32_t> ids = r.prompt;
  ids.insert(ids.end(), gen[0].tokens.begin(), gen[0].tokens.end() - 1);
  auto decoded = test::score_positions(*e, ids, static_cast<int>(r.prompt.size()));  // decode path
  auto prefilled = test::score_positions(*e, ids, static_cast<int>(ids.size()));     // one prefill
  for (size_t p = 0; p < ids.size(); ++p) {
    ASSERT_FALSE(decoded[p].empty()) << p;
    EXPECT_LT(test::rel_l2(decoded[p], prefilled[p]), 1e-5) << "position " << p;
    if (p + 1 >= r.prompt.size()) {
      auto am = std::max_element(prefilled[p].begin(), prefilled[p].end()) - prefilled[p].begin();
      EXPECT_EQ(am, gen[0].tokens[p + 1 - r.prompt.size()]) << "re-prefill disagrees at step " << p;
    }
  }
}

TEST(EngineCpu, ChunkedPrefillMatchesOneShotPrefill) {
  std::vector<int32_t> ids = test::random_token_ids(70);
  auto big = make_cpu_engine();
  auto whole = test::score_positions(*big, ids, 70);
  EngineLimits small;
  small.max_batch_tokens = 16;  // 70 tokens -> 5 chunks
  small.max_seqs = 4;
  small.logits_rows = 16;
  auto e = make_cpu_engine(small);
  std::vector<std::vector<float>> rows(ids.size());
  Request r;
  r.prompt = ids;
  r.max_new_tokens = 1;
  r.all_logits = true;
  r.on_logits = [&](int64_t, int pos, const float* row) { rows[pos].assign(row, row + e->config().vocab_size); };
  e->submit(r);
  e->run_until_idle();
  EXPECT_GE(e->steps_run(), 5);
  for (size_t p = 0; p < ids.size(); ++p) EXPECT_LT(test::rel_l2(rows[p], whole[p]), 1e-5) << p;
}

// The fused op table (fused q/k/v and gate/up GEMMs, add_rmsnorm,
// rope_kv_write) is a re-arrangement of the unfused one: on the CPU, whose
// fused kernels ARE the unfused references run back to back, logits through
// prefill, chunked prefill (mixed steps) and decode must agree to fp32
// rounding (the concatenated GEMM may block its n dimension differently).
TEST(EngineCpu, FusedAndUnfusedOpTablesGiveTheSameLogits) {
  std::vector<int32_t> ids = test::random_token_ids(60);
  EngineLimits small;
  small.max_batch_tokens = 16;  // chunked: mixed steps too
  small.max_seqs = 4;
  small.logits_rows = 16;
  auto fused = make_cpu_engine(small, true), unfused = make_cpu_engine(small, false);
  ASSERT_EQ(fused->describe()["fusion"], "on") << "the tiny model's weights are adjacent";
  ASSERT_EQ(unfused->describe()["fusion"], "off");
  for (int prefill : {1, 37}) {
    auto a = test::score_positions(*fused, ids, prefill);
    auto b = test::score_positions(*unfused, ids, prefill);
    double worst = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      ASSERT_FALSE(a[p].empty()) << p;
      worst = std::max(worst, test::rel_l2(a[p], b[p]));
    }
    EXPECT_LT(worst, 1e-5) << "prefill " << prefill;
  }
}

// The pruned last layer (StepKind::prune; default on): prefill and mixed
// steps run their last layer past the KV write on the logit rows only, their
// attention over the paged cache (attention_decode) instead of the fresh-row
// kernel. Every logits row a teacher-forced run delivers -- one-shot prefills,
// chunked prompts (head-less chunks end the last layer at the KV write; mixed
// steps carry decode rows beside them), several prompts per step -- must equal
// the full layer's to fp32 rounding (the two attention kernels sum in another
// order). The pruned ops must actually run: counted by an observer.
TEST(EngineCpu, PrunedLastLayerGivesTheSameLogits) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  struct Count : Observer {
    std::map<std::string, int> ops;
    void on_op_begin(const OpInfo& op) override { ++ops[op.op]; }
  };
  auto make = [](bool prune, Observer* obs) {
    ModelConfig cfg = ModelConfig::load(tiny_engine_model());
    EngineOptions opt;
    opt.backend = kernels::Backend::cpu;
    opt.limits.max_batch_tokens = 24;  // chunked prompts and mixed steps
    opt.limits.max_seqs = 4;
    opt.limits.logits_rows = 8;
    opt.limits.max_context = 256;
    opt.kernels = {{"prune_last", prune ? "on" : "off"}};
    opt.observer = obs;
    return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt);
  };
  test::ForcedWork work;
  for (int i = 0; i < 7; ++i) work.emplace_back(test::random_token_ids(1 + 11 * i), test::random_token_ids(3 + i));
  Count pruned_ops, full_ops;
  auto pruned = make(true, &pruned_ops), full = make(false, &full_ops);
  ASSERT_EQ(pruned->describe()["prune_last"], "on");
  ASSERT_EQ(full->describe()["prune_last"], "off");
  test::LogitRows a, b;
  ASSERT_EQ(test::run_forced(*pruned, work, a), work.size());
  ASSERT_EQ(test::run_forced(*full, work, b), work.size());
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [key, ref] : b) {
    ASSERT_TRUE(a.count(key)) << "request " << key.first << " position " << key.second;
    worst = std::max(worst, test::rel_l2(a[key], ref));
  }
  EXPECT_GT(pruned_ops.ops["head_gather"], 0);
  EXPECT_EQ(pruned_ops.ops["head_gather"], pruned_ops.ops["attention_head"]);
  EXPECT_EQ(full_ops.ops["head_gather"] + full_ops.ops["attention_head"], 0);
  EXPECT_EQ(pruned_ops.ops["gate_up_swiglu"], full_ops.ops["gate_up_swiglu"]) << "every step had logit rows";
  // One 60-token prompt alone: its first two 24-row chunks take no logits, so
  // their last layer ends at the KV write (one gate_up_swiglu fewer each; the
// second chunk's rows are paged rows, a decode-kind step).
  pruned_ops.ops.clear();
  full_ops.ops.clear();
  const test::ForcedWork one = {{test::random_token_ids(60), test::random_token_ids(2)}};
  ASSERT_EQ(test::run_forced(*pruned, one, a), 1u);
  ASSERT_EQ(test::run_forced(*full, one, b), 1u);
  for (int pos = 59; pos < 61; ++pos) worst = std::max(worst, test::rel_l2(a[{0, pos}], b[{0, pos}]));
  EXPECT_EQ(pruned_ops.ops["gate_up_swiglu"] + 2, full_ops.ops["gate_up_swiglu"]);
  // A score-mode request (every position's logits) batched with a plain one:
  // the step still has fewer logit rows than rows, so it prunes, and the head
  // rows hold several rows of one sequence (attention_head without
  // one_row_per_seq).
  auto mixed = [](Engine& e) {
    test::LogitRows rows;
    const int vocab = e.config().vocab_size;
    for (int i = 0; i < 2; ++i) {
      Request r;
      r.prompt = test::random_token_ids(i == 0 ? 12 : 20);
      r.forced_tokens = test::random_token_ids(3);
      r.max_new_tokens = 3;
      r.stop_at_eos = false;
      r.all_logits = i == 0;
      r.on_logits = [&rows, i, vocab](int64_t, int pos, const float* row) { rows[{i, pos}].assign(row, row + vocab); };
      e.submit(r);
    }
    e.run_until_idle();
    EXPECT_EQ(e.take_finished().size(), 2u);
    return rows;
  };
  test::rng().seed(test::test_seed() + 1);
  const test::LogitRows pa = mixed(*pruned);
  test::rng().seed(test::test_seed() + 1);
  const test::LogitRows fa = mixed(*full);
  ASSERT_EQ(pa.size(), fa.size());
  EXPECT_GE(pa.size(), 12u + 3u);
  for (const auto& [key, ref] : fa) worst = std::max(worst, test::rel_l2(pa.at(key), ref));
  EXPECT_LT(worst, 1e-5);
  std::printf("[engine-cpu] pruned vs full last layer: %zu logits rows, worst rel-L2 %.2e\n", b.size(), worst);
}

// last_step_timing splits a step's wall time at Model::run: host time
// non-negative, Model::run (the whole forward pass on the CPU) positive, and
// together within the step's wall time measured around step().
TEST(EngineCpu, StepTimingSplitsHostAndModelTime) {
  auto e = make_cpu_engine();
  Request r;
  r.prompt = test::random_token_ids(8);
  r.max_new_tokens = 3;
  r.stop_at_eos = false;
  e->submit(r);
  int steps = 0;
  while (true) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!e->step()) break;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepTiming& t = e->last_step_timing();
    EXPECT_GE(t.host_s, 0);
    EXPECT_GT(t.model_s, 0);
    EXPECT_LE(t.host_s + t.model_s, wall);
    ++steps;
  }
  EXPECT_EQ(steps, 3);
}

TEST(EngineCpu, KernelsFusionOverrideIsCheckedAndApplied) {
  ModelConfig cfg = ModelConfig::load(tiny_engine_model());
  EngineOptions opt;
  opt.kernels = {{"fusion", "off"}};
  Engine off(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt);
  EXPECT_EQ(off.describe()["fusion"], "off");
  opt.kernels = {{"fusion", "maybe"}};
  try {
    Engine e(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt);
    ADD_FAILURE() << "fusion=maybe was accepted";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), testing::HasSubstr("fusion must be 'on' or 'off'"));
  }
  // The prefill-graphs switch is the same kind of pseudo-family; the CPU
  // backend has no graphs, so it always reports "off".
  opt.kernels = {{"prefill_graphs", "on"}};
  Engine on(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt);
  EXPECT_EQ(on.describe()["prefill_graphs"], "off");
  opt.kernels = {{"prefill_graphs", "yes"}};
  EXPECT_THROW(Engine(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt), Error);
}

TEST(EngineCpu, BatchedAndPreemptedRunsMatchSoloRuns) {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = test::random_token_ids(3 + 7 * i);
    r.max_new_tokens = 12 + i;
    r.stop_at_eos = false;
    r.tag = std::to_string(i);
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> solo;
  {
    auto e = make_cpu_engine();
    for (const auto& r : reqs) solo.push_back(run_all(*e, {r})[0].tokens);
  }
  auto e = make_cpu_engine();
  auto batched = run_all(*e, reqs);
  ASSERT_EQ(batched.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(batched[i].tokens, solo[i]) << "request " << i;

  // A pool that holds one full-context sequence and little more forces preemption.
  EngineLimits tight;
  tight.max_context = 64;
  tight.max_seqs = 6;
  ModelConfig cfg = ModelConfig::load(tiny_engine_model());
  tight.kv_num_blocks = cfg.num_layers * (64 / 16) + cfg.num_layers * 2;
  auto p = make_cpu_engine(tight);
  auto pre = run_all(*p, reqs);
  int preemptions = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    preemptions += pre[i].preemptions;
    size_t n = std::min<size_t>(solo[i].size(), 64 - reqs[i].prompt.size());
    EXPECT_EQ(std::vector<int32_t>(pre[i].tokens.begin(), pre[i].tokens.begin() + n),
              std::vector<int32_t>(solo[i].begin(), solo[i].begin() + n))
        << "request " << i;
  }
  EXPECT_GT(preemptions, 0) << "the tight pool should have forced a preemption";
}

TEST(EngineCpu, BadRequestsAreRefusedWithTheFix) {
  EngineLimits lim;
  lim.max_context = 32;
  lim.max_queue = 2;
  auto e = make_cpu_engine(lim);
  Request r;
  r.prompt = test::random_token_ids(40);
  try {
    e->submit(r);
    FAIL() << "a prompt longer than the context must be refused";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), ::testing::HasSubstr("max_context"));
  }
  r.prompt = {5, 999999};
  EXPECT_THROW(e->submit(r), Error);
  r.prompt = {5, 6};
  e->submit(r);
  e->submit(r);
  try {
    e->submit(r);
    FAIL() << "a full queue must refuse";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), ::testing::HasSubstr("queue is full"));
  }
  e->run_until_idle();
  EXPECT_EQ(e->take_finished().size(), 2u) << "no accepted request may be lost";
}

// The manifest's config.gemm_plans entry reads back into the same plan
// (what `lantern rerun` pins), and a missing field is an error, not a zero.
TEST(GemmPlanJson, RoundTripsEveryRecordedField) {
  kernels::GemmPlan p;
  p.m_bucket = 64, p.m_timed = 64, p.n = 3072, p.k = 2048, p.c_f32 = true, p.align = 256;
  p.algo_id = 66, p.tile = 21, p.stages = 9, p.split_k = 2, p.reduction = 1, p.swizzle = 1;
  p.custom = 3, p.cluster = 4, p.workspace = 4096, p.workspace_limit = 8 << 20, p.candidates = 18;
  p.rank = 5, p.split_added = true, p.us = 10.5, p.heuristic_us = 11.25, p.timed = true, p.cold_l2 = true;
  const nlohmann::json j = gemm_plan_json(p);
  const kernels::GemmPlan q = gemm_plan_from_json(j);
  EXPECT_TRUE(q.config() == p.config());
  EXPECT_EQ(gemm_plan_json(q), j);
  nlohmann::json missing = j;
  missing.erase("tile");
  EXPECT_THROW(gemm_plan_from_json(missing), nlohmann::json::exception);
}

// A whole config.gemm_plans list (what `lantern rerun` sends each TP rank in
// its setup, from that rank's manifest) reads back into the same plans, in
// order; null is none; one malformed entry fails the list.
TEST(GemmPlanJson, AManifestListRoundTrips) {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < 3; ++i) {
    kernels::GemmPlan p;
    p.m_bucket = 32 << i, p.n = 1024 + i, p.k = 2048, p.align = 16 << i, p.algo_id = 20 + i;
    p.tile = i, p.split_k = 1 + i, p.workspace_limit = size_t{1} << (20 + i);
    list.push_back(gemm_plan_json(p));
  }
  const std::vector<kernels::GemmPlan> plans = gemm_plans_from_json(list);
  ASSERT_EQ(plans.size(), 3u);
  for (size_t i = 0; i < plans.size(); ++i) EXPECT_EQ(gemm_plan_json(plans[i]), list[i]) << i;
  EXPECT_TRUE(gemm_plans_from_json(nullptr).empty());
  EXPECT_TRUE(gemm_plans_from_json(nlohmann::json::parse(list.dump())).size() == 3);  // through text
  list[1].erase("algo_id");
  EXPECT_THROW(gemm_plans_from_json(list), nlohmann::json::exception);
}

}  // namespace
}  // namespace lantern
