// The CUDA engine against the CPU reference engine on the tiny synthetic
// model: teacher-forced logits through prefill and decode, CUDA-graph decode
// against eager decode, and a batched run under KV pressure.
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

using test::ForcedWork;
using test::LogitRows;
using test::run_forced;

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path dir = test::synth_tiny("engine-gpu-tiny", 99);
  return dir;
}

std::unique_ptr<Engine> make_engine(kernels::Backend b, EngineLimits lim = {}, bool graphs = true,
                                    Observer* observer = nullptr, bool fused = true,
                                    bool prefill_graphs = true) {
  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions opt;
  opt.fused = fused;
  opt.prefill_graphs = prefill_graphs;
  opt.backend = b;
  opt.limits = lim;
  opt.use_cuda_graphs = graphs;
  opt.observer = observer;
  if (b == kernels::Backend::cuda && lim.kv_num_blocks == 0) opt.limits.kv_num_blocks = 16384;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), b), opt);
}



TEST(EngineGpu, LogitsMatchTheCpuReferenceThroughPrefillAndDecode) {
  LANTERN_REQUIRE_GPU();
  EngineLimits lim;
  lim.max_batch_tokens = 256;
  lim.logits_rows = 256;
  auto cpu = make_engine(kernels::Backend::cpu, lim);
  auto gpu = make_engine(kernels::Backend::cuda, lim);
  for (int prompt : {1, 17, 100}) {
    std::vector<int32_t> ids = test::random_token_ids(prompt + 40);
    auto ref = test::score_positions(*cpu, ids, prompt);
    auto got = test::score_positions(*gpu, ids, prompt);
    double worst = 0;
    int agree = 0, decided = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      ASSERT_EQ(got[p].size(), ref[p].size()) << p;
      worst = std::max(worst, test::rel_l2(got[p], ref[p]));
      // The argmax can only move where the reference's top-1 margin is at
      // most twice the largest difference at that position: there the bf16
      // run may pick either token; everywhere else it must agree.
      float max_diff = 0;
      for (size_t i = 0; i < ref[p].size(); ++i) max_diff = std::max(max_diff, std::abs(got[p][i] - ref[p][i]));
      std::vector<float> top(ref[p]);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      const auto got_top = std::max_element(got[p].begin(), got[p].end()) - got[p].begin();
      const auto ref_top = std::max_element(ref[p].begin(), ref[p].end()) - ref[p].begin();
      agree += got_top == ref_top;
      if (top[0] - top[1] > 2 * max_diff) {
        ++decided;
        EXPECT_EQ(got_top, ref_top) << "prompt " << prompt << " position " << p << ": margin "
                                    << top[0] - top[1] << " > 2 x max |diff| " << max_diff;
      }
    }
    // bf16 activations through 2 layers: rel-L2 of a few 1e-3; 5e-2 catches
    // any real indexing or math error (those give O(1)).
    EXPECT_LT(worst, 5e-2) << "prompt " << prompt;
    // Random weights give near-flat logits, so not every position is decided;
    // a quarter at least keeps the check from being vacuous.
    EXPECT_GE(decided, static_cast<int>(ids.size() / 4)) << "prompt " << prompt;
    std::printf("[engine-gpu] prompt %d: worst rel-L2 %.2e, top-1 agreement %d/%zu (%d decided by the margin, all agree)\n",
                prompt, worst, agree, ids.size(), decided);
  }
}

// The fused op table (fused q/k/v and gate/up GEMMs, add_rmsnorm,
// rope_kv_write; default) against the unfused one, both on the GPU, through
// prefill (one-shot and chunked, so mixed steps too) and graph-replayed
// decode. Both round activations to bf16, in different places only where the
// fused GEMMs accumulate in another order: rel-L2 of ~1e-3.
TEST(EngineGpu, FusedAndUnfusedOpTablesAgree) {
  LANTERN_REQUIRE_GPU();
  EngineLimits lim;
  lim.max_batch_tokens = 32;
  lim.logits_rows = 32;
  auto fused = make_engine(kernels::Backend::cuda, lim, true, nullptr, true);
  auto unfused = make_engine(kernels::Backend::cuda, lim, true, nullptr, false);
  ASSERT_EQ(fused->describe()["fusion"], "on");
  ASSERT_EQ(unfused->describe()["fusion"], "off");
  for (int prompt : {1, 17, 70}) {
    std::vector<int32_t> ids = test::random_token_ids(prompt + 30);
    auto a = test::score_positions(*fused, ids, prompt);
    auto b = test::score_positions(*unfused, ids, prompt);
    double worst = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      ASSERT_EQ(a[p].size(), b[p].size()) << p;
      ASSERT_FALSE(a[p].empty()) << p;
      worst = std::max(worst, test::rel_l2(a[p], b[p]));
    }
    EXPECT_LT(worst, 2e-2) << "prompt " << prompt;
    std::printf("[engine-gpu] fused vs unfused, prompt %d: worst rel-L2 %.2e\n", prompt, worst);
  }
}

// The early-load variants -- attention_decode.9 (split_k_early), .11
// (split_k_early48) and
// rope_kv_write.2 (vec_early; in decode steps through qkv_rope.1, which
// launches the engine's rope_kv_write variant) -- read what no earlier kernel writes (step
// metadata, block-table entries, sin/cos; attention: the K/V rows before the
// newest) BEFORE their PDL dependency wait, and only the rest after. In
// graph-replayed decode, behind the kernels that write q, k, v and the newest
// cache row, they must compute exactly what variants 5 and 1 (the same
// arithmetic, every load after the wait) compute: a stale row would be an
// O(1) difference. Contexts from 1 to ~150 tokens cross KV blocks (16 tokens)
// and splits (64 keys); batches 1-10.
TEST(EngineGpu, EarlyLoadKernelsEqualTheirWaitFirstForms) {
  LANTERN_REQUIRE_GPU();
  auto make = [](const char* attention, const char* rope, EngineLimits lim = {}) {
    ModelConfig cfg = ModelConfig::load(tiny_model());
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits = lim;
    opt.limits.kv_num_blocks = 16384;
    // qkv_rope.1: decode steps launch the rope_kv_write variant (the default, qkv_rope.3, does not
    // up to 8 rows).
    opt.kernels = {{"attention_decode", attention}, {"rope_kv_write", rope}, {"qkv_rope", "unfused"}};
    return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), opt.backend), opt);
  };
  ForcedWork work;
  for (int i = 0; i < 10; ++i) work.emplace_back(test::random_token_ids(1 + 7 * i), test::random_token_ids(20 + 4 * i));
  auto run = [&work](Engine& e) {
    LogitRows rows;
    EXPECT_EQ(run_forced(e, work, rows), work.size());
    return rows;
  };
  // Variant 9 against 5, and 11 (variant 10's crossover, the early kernels)
  // against 10 (below 48 rows both are variant 5's arithmetic).
  for (const auto& [early_v, plain_v] : {std::pair<const char*, const char*>{"9", "5"}, {"11", "10"}}) {
  SCOPED_TRACE(std::string("attention_decode ") + early_v + " vs " + plain_v);
  auto early = make(early_v, "2"), plain = make(plain_v, "1");
  ASSERT_EQ(early->kernel_set().entry(kernels::Family::attention_decode).variant, std::atoi(early_v));
  ASSERT_EQ(early->kernel_set().entry(kernels::Family::rope_kv_write).variant, 2);
  const LogitRows a = run(*early), b = run(*plain);
  const size_t differ = test::differing_rows(a, b);
  EXPECT_EQ(differ, 0u) << "of " << b.size() << " positions";
  // Score mode with a prompt longer than a step (32 rows): a continuing
  // chunk's rows are paged rows of ONE sequence whose earlier positions this
  // step writes too; variant 9 must wait first there (one_row_per_seq false).
  EngineLimits lim;
  lim.max_batch_tokens = 32;
  lim.logits_rows = 32;
  auto early_chunked = make(early_v, "2", lim), plain_chunked = make(plain_v, "1", lim);
  const std::vector<int32_t> ids = test::random_token_ids(100);
  const auto sa = test::score_positions(*early_chunked, ids, 70), sb = test::score_positions(*plain_chunked, ids, 70);
  const size_t chunked_differ = test::differing_rows(sa, sb);
  EXPECT_EQ(chunked_differ, 0u) << "of " << sa.size() << " scored positions (chunked prompt, score mode)";
  std::printf("[engine-gpu] attention_decode %s + rope_kv_write 2 vs %s + 1 in graphs: %zu of %zu positions differ\n",
              early_v, plain_v, differ, b.size());
  }
}

// qkv_rope.2 (the q/k/v GEMV with RoPE and the KV write in its epilogue) and
// .3 (the default: 2 up to 8 rows) against qkv_rope.1 (the GEMV, then rope_kv_write.1: the kernels the separate
// ops launched) in graph-replayed decode steps of 1-10 rows: the same fp32
// sums and the same rotation, so every logit of every position must be
// bit-identical -- a cache row written wrong, late (after the attention's
// PDL-early loads) or not at all would be an O(1) difference in the logits
// after it. Also with a prompt in 16-row chunks (score mode): the continuing
// chunks are decode steps with 16 rows of one sequence.
TEST(EngineGpu, FusedQkvRopeEqualsTheUnfusedKernels) {
  LANTERN_REQUIRE_GPU();
  auto make = [](const char* qkv_rope, EngineLimits lim = {}) {
    ModelConfig cfg = ModelConfig::load(tiny_model());
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits = lim;
    opt.limits.kv_num_blocks = 16384;
    opt.kernels = {{"qkv_rope", qkv_rope}};
    return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), opt.backend), opt);
  };
  ForcedWork work;
  for (int i = 0; i < 10; ++i) work.emplace_back(test::random_token_ids(1 + 7 * i), test::random_token_ids(20 + 4 * i));
  auto fused = make("gemv_rope"), plain = make("unfused"), small = make("gemv_rope_small");
  ASSERT_EQ(fused->kernel_set().entry(kernels::Family::qkv_rope).variant, 2);
  LogitRows a, b, c;
  ASSERT_EQ(run_forced(*fused, work, a), work.size());
  ASSERT_EQ(run_forced(*plain, work, b), work.size());
  ASSERT_EQ(run_forced(*small, work, c), work.size());  // variant 3: 2 up to 8 rows, 1 above
  const size_t differ = test::differing_rows(a, b), small_differ = test::differing_rows(c, b);
  EXPECT_EQ(differ, 0u) << "of " << b.size() << " positions";
  EXPECT_EQ(small_differ, 0u) << "of " << b.size() << " positions (variant 3)";
  EngineLimits lim;  // chunks of 16 rows: the GEMV's largest m, several rows of one sequence
  lim.max_batch_tokens = 16;
  lim.logits_rows = 16;
  auto fused_chunked = make("gemv_rope", lim), plain_chunked = make("unfused", lim);
  const std::vector<int32_t> ids = test::random_token_ids(100);
  const auto sa = test::score_positions(*fused_chunked, ids, 70), sb = test::score_positions(*plain_chunked, ids, 70);
  const size_t chunked_differ = test::differing_rows(sa, sb);
  EXPECT_EQ(chunked_differ, 0u) << "of " << sa.size() << " scored positions (chunked prompt, score mode)";
  std::printf("[engine-gpu] qkv_rope 2 (3) vs 1 in graphs: %zu (%zu) of %zu positions differ, %zu of %zu chunked\n",
              differ, small_differ, b.size(), chunked_differ, sa.size());
}

// gemm.6 (cuBLASLt with per-shape measured algorithms above m = 16) against
// gemm.1 (cublasGemmEx) in the engine: teacher-forced logits through a
// 100-token prefill (m = 100, bucket 128) and graph-replayed decode. The plans
// are made at start-up (Model::prepare_kernels: every power-of-two bucket of
// every GEMM shape, timed) and reach describe()'s gemm_plans.
TEST(EngineGpu, PlannedGemmMatchesCublasAndRecordsItsPlans) {
  LANTERN_REQUIRE_GPU();
  EngineLimits lim;
  lim.max_batch_tokens = 128;
  lim.logits_rows = 128;
  lim.kv_num_blocks = 16384;
  auto make = [&](const char* gemm) {
    ModelConfig cfg = ModelConfig::load(tiny_model());
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits = lim;
    opt.kernels = {{"gemm", gemm}};
    return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cuda), opt);
  };
  auto planned = make("lt_planned"), seed = make("seed");
  const nlohmann::json d = planned->describe();
  ASSERT_EQ(d["kernels"]["gemm"]["name"], "lt_planned");
  ASSERT_TRUE(d.contains("gemm_plans"));
  // gemm.1 plans nothing, but the fused families' GEMMs (gate_up, o, down) run
  // planned cuBLASLt above the GEMV whatever `gemm` is: the seed engine records
  // those and no qkv plan (decode steps' qkv_rope.3 launches the engine's gemm
  // variant above 8 rows, gemm.1 here, and runs its prepare hook: none).
  const ModelConfig& sc = seed->config();
  for (const auto& p : seed->describe().value("gemm_plans", nlohmann::json::array()))
    EXPECT_FALSE(p["n"] == sc.q_dim() + 2 * sc.kv_dim() && p["k"] == sc.hidden_size) << p.dump();
  std::map<int, int> per_bucket;
  for (const auto& p : d["gemm_plans"]) {
    ++per_bucket[p["m_bucket"].get<int>()];
    EXPECT_TRUE(p["timed"].get<bool>()) << p.dump();
    EXPECT_GT(p["us"].get<double>(), 0) << p.dump();
    EXPECT_GE(p["candidates"].get<int>(), 1) << p.dump();
  }
  for (int bucket : {32, 64, 128})  // (other engines of this process may have planned more)
    EXPECT_GT(per_bucket[bucket], 0) << "bucket " << bucket << " unplanned: " << d["gemm_plans"].dump();
  // Every GEMM a step can launch above the GEMV is recorded -- also those the
  // fused families run (gate_up_swiglu's [2 inter, hidden], proj_residual_norm's
  // o and down projections), which `lantern rerun` must pin like gemm's own.
  const ModelConfig& c = planned->config();
  const std::set<std::pair<int, int>> shapes = {{c.q_dim() + 2 * c.kv_dim(), c.hidden_size},
                                                {c.hidden_size, c.q_dim()},
                                                {2 * c.intermediate_size, c.hidden_size},
                                                {c.hidden_size, c.intermediate_size}};
  for (const auto& [n, k] : shapes)
    for (int bucket : {32, 64, 128}) {
      bool found = false;
      for (const auto& p : d["gemm_plans"])
        found |= p["n"] == n && p["k"] == k && p["m_bucket"] == bucket;
      EXPECT_TRUE(found) << "no recorded plan for n=" << n << " k=" << k << " bucket " << bucket;
    }
  std::vector<int32_t> ids = test::random_token_ids(140);
  auto a = test::score_positions(*planned, ids, 100);
  auto b = test::score_positions(*seed, ids, 100);
  double worst = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size()) << p;
    ASSERT_FALSE(a[p].empty()) << p;
    worst = std::max(worst, test::rel_l2(a[p], b[p]));
  }
  EXPECT_LT(worst, 2e-2);
  std::printf("[engine-gpu] gemm.6 vs gemm.1: worst rel-L2 %.2e over %zu positions, %zu plans\n", worst,
              ids.size(), d["gemm_plans"].size());
}

std::vector<RequestResult> run_requests(Engine& e, const std::vector<Request>& reqs) {
  for (const auto& r : reqs) e.submit(r);
  e.run_until_idle();
  auto res = e.take_finished();
  std::sort(res.begin(), res.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return res;
}

// Batches whose size is a graph bucket replay without padding: the same
// kernels on the same rows as eager decode, so the same tokens.
TEST(EngineGpu, GraphDecodeEqualsEagerDecodeAtBucketSizes) {
  LANTERN_REQUIRE_GPU();
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {  // admitted together, finished together: batch 4 throughout
    Request r;
    r.prompt = test::random_token_ids(7);
    r.max_new_tokens = 24;
    r.stop_at_eos = false;
    reqs.push_back(r);
  }
  auto eager = make_engine(kernels::Backend::cuda, {}, false);
  auto graphs = make_engine(kernels::Backend::cuda, {}, true);
  auto a = run_requests(*eager, reqs), b = run_requests(*graphs, reqs);
  ASSERT_EQ(a.size(), reqs.size());
  ASSERT_EQ(b.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
}

// Overlapped decode on the GPU (continuations launched before the step they
// continue is postprocessed, tokens gathered on the device from the previous
// step's output, double-buffered metadata) against synchronous steps: with
// no EOS stops both engines run the same batches, so every token of sampled,
// greedy and forced-token requests of different lengths (the batch shrinks
// through the graph buckets; one request arrives mid-run) is identical.
TEST(EngineGpu, OverlappedDecodeEqualsSynchronousDecode) {
  LANTERN_REQUIRE_GPU();
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.prompt = test::random_token_ids(3 + 4 * i);
    r.max_new_tokens = 8 + 3 * i;
    r.stop_at_eos = false;
    if (i % 3 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.top_k = i % 2 ? 50 : 0;
      r.sampling.seed = 77 + i;
    }
    if (i == 4) r.forced_tokens = test::random_token_ids(5);
    reqs.push_back(r);
  }
  ModelConfig cfg = ModelConfig::load(tiny_model());
  auto run = [&](bool overlap, OverlapStats& stats) {
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits.kv_num_blocks = 16384;
    opt.kernels = {{"overlap", overlap ? "on" : "off"}};
    Engine e(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cuda), opt);
    for (size_t i = 0; i + 1 < reqs.size(); ++i) e.submit(reqs[i]);
    // The late request arrives once 7 steps are launched: with overlap that
    // is after 6 calls (step 7, a continuation, is in flight), without it
    // after 7. Either way it joins step 8, so both runs batch the same rows in
    // every step. (Arriving after 6 calls in both, it joined step 7 in one and
    // step 8 in the other: a decode row then ran in a mixed step in one run
    // and a pure decode step in the other, whose GEMMs round differently, and
    // a near-tie token could flip; LANTERN_TEST_SEED=4 did, before session 27.)
    while (e.steps_run() < 7) EXPECT_TRUE(e.step());
    e.submit(reqs.back());
    e.run_until_idle();
    stats = e.overlap_stats();
    auto res = e.take_finished();
    std::sort(res.begin(), res.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return res;
  };
  OverlapStats s_sync, s_overlap;
  auto sync = run(false, s_sync);
  auto overlapped = run(true, s_overlap);
  ASSERT_EQ(sync.size(), reqs.size());
  ASSERT_EQ(overlapped.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(overlapped[i].tokens, sync[i].tokens) << "request " << i;
    EXPECT_EQ(static_cast<int>(overlapped[i].tokens.size()), reqs[i].max_new_tokens) << "request " << i;
  }
  EXPECT_EQ(s_sync.continuations, 0);
  EXPECT_GT(s_overlap.continuations, 20);
  EXPECT_EQ(s_overlap.discarded_rows, 0);
}

// The pruned last layer (default; StepKind::prune) against the full one on
// the GPU: teacher-forced requests (prompts of 1-82 tokens, 64-row steps, so
// one-shot prompts, continuing chunks and mixed steps; then one prompt alone,
// a pure prefill step), eagerly and with prefill and decode graphs. The pruned rows' last layer runs the GEMV-sized
// kernels and attention_decode instead of the prompt kernels: logits agree to
// bf16 rounding (rel-L2 of a few 1e-3; an indexing error is O(1)). The pruned
// ops must run: counted in eager steps and in the replayed prefill graphs.
TEST(EngineGpu, PrunedLastLayerAgreesWithTheFullLayer) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  struct Count : Observer {
    int eager_heads = 0, replayed_heads = 0;
    void on_op_begin(const OpInfo& op) override {
      eager_heads += op.graph != OpInfo::kCapture && std::string(op.op) == "attention_head";
    }
    void on_graph_replay(const GraphReplay& g) override {
      for (int i = 0; i < g.num_ops; ++i) replayed_heads += std::string(g.ops[i].op) == "attention_head";
    }
  };
  auto make = [](bool prune, bool graphs, Observer* obs) {
    ModelConfig cfg = ModelConfig::load(tiny_model());
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits.max_batch_tokens = 64;
    opt.limits.logits_rows = 64;
    opt.limits.kv_num_blocks = 16384;
    opt.use_cuda_graphs = graphs;
    opt.observer = obs;
    opt.kernels = {{"prune_last", prune ? "on" : "off"}};
    return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), opt.backend), opt);
  };
  // Ten requests at once (one-shot prompts, chunks and mixed steps: eager),
  // then one 40-token prompt alone (a pure prefill step: a graph replay).
  ForcedWork work, solo = {{test::random_token_ids(40), test::random_token_ids(5)}};
  for (int i = 0; i < 10; ++i) work.emplace_back(test::random_token_ids(1 + 9 * i), test::random_token_ids(6 + i));
  auto run_both = [&](Engine& e, LogitRows& rows) {
    ASSERT_EQ(run_forced(e, work, rows), work.size());
    LogitRows one;
    ASSERT_EQ(run_forced(e, solo, one), 1u);
    for (auto& [key, row] : one) rows[{100 + key.first, key.second}] = std::move(row);
  };
  LogitRows full_rows;
  {
    auto full = make(false, false, nullptr);
    ASSERT_EQ(full->describe()["prune_last"], "off");
    run_both(*full, full_rows);
  }
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    Count count;
    auto pruned = make(true, graphs, &count);
    ASSERT_EQ(pruned->describe()["prune_last"], "on");
    LogitRows rows;
    run_both(*pruned, rows);
    ASSERT_EQ(rows.size(), full_rows.size());
    double worst = 0;
    size_t agree = 0;
    for (const auto& [key, ref] : full_rows) {
      const auto& got = rows[key];
      ASSERT_EQ(got.size(), ref.size()) << key.first << " " << key.second;
      worst = std::max(worst, test::rel_l2(got, ref));
      agree += std::max_element(got.begin(), got.end()) - got.begin() ==
               std::max_element(ref.begin(), ref.end()) - ref.begin();
    }
    std::printf("[engine-gpu] pruned last layer (%s) vs full: %zu positions, worst rel-L2 %.2e, top-1 "
                "agreement %zu; attention_head %d eager, %d in replayed graphs\n",
                graphs ? "graphs" : "eager", full_rows.size(), worst, agree, count.eager_heads,
                count.replayed_heads);
    EXPECT_LT(worst, 2e-2);
    EXPECT_GE(agree, full_rows.size() * 95 / 100);
    EXPECT_GT(count.eager_heads, 0) << "continuing chunks and mixed steps run eagerly";
    if (graphs) {
      EXPECT_GT(count.replayed_heads, 0) << "one-shot prompts replay a pruned prefill graph";
    }
  }
}

// Batches of every size (10 requests finishing one by one) replay padded
// buckets: teacher-forced, the logits of every decoded position agree with
// eager decode to bf16 rounding (a padded GEMM may tile differently), and
// pad rows never leak into real ones (that would be an O(1) error).
TEST(EngineGpu, PaddedGraphReplaysMatchEagerLogits) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  struct Replays : Observer {
    int tokens = 0, padded = 0, replays = 0;
    void on_step_begin(const StepInfo& s) override { tokens = s.num_tokens; }
    void on_graph_replay(const GraphReplay& g) override {
      if (g.graph >= 10) return;  // a prefill graph (after the 10 decode graphs)
      ++replays;
      padded += (1 << (g.graph / 2)) > tokens;  // buckets 1, 2, 4, 8, 16 (max_seqs 16)
    }
  } obs;
  ForcedWork work;
  for (int i = 0; i < 10; ++i) work.emplace_back(test::random_token_ids(1 + 9 * i), test::random_token_ids(10 + 3 * i));
  auto run = [&work](Engine& e, LogitRows& rows) { return run_forced(e, work, rows); };
  LogitRows eager_rows, graph_rows;
  auto eager = make_engine(kernels::Backend::cuda, {}, false);
  ASSERT_EQ(run(*eager, eager_rows), 10u);
  auto graphs = make_engine(kernels::Backend::cuda, {}, true, &obs);
  ASSERT_EQ(run(*graphs, graph_rows), 10u);
  ASSERT_EQ(graph_rows.size(), eager_rows.size());
  double worst = 0;
  size_t agree = 0;
  for (const auto& [key, ref] : eager_rows) {
    const auto& got = graph_rows[key];
    ASSERT_EQ(got.size(), ref.size());
    worst = std::max(worst, test::rel_l2(got, ref));
    agree += std::max_element(got.begin(), got.end()) - got.begin() ==
             std::max_element(ref.begin(), ref.end()) - ref.begin();
  }
  std::printf("[engine-gpu] %d graph replays, %d padded; %zu positions: worst rel-L2 %.2e vs eager, "
              "top-1 agreement %zu\n",
              obs.replays, obs.padded, eager_rows.size(), worst, agree);
  EXPECT_GT(obs.padded, 0) << "the workload must replay padded buckets";
  EXPECT_LT(worst, 2e-2);
  EXPECT_GE(agree, eager_rows.size() * 95 / 100);
}

TEST(EngineGpu, GraphsFinishEveryRequestUnderKvPressure) {
  LANTERN_REQUIRE_GPU();
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    Request r;
    r.prompt = test::random_token_ids(1 + 9 * i);
    r.max_new_tokens = 20 + 3 * i;
    r.stop_at_eos = false;
    reqs.push_back(r);
  }
  EngineLimits tight;
  tight.max_context = 128;
  tight.kv_num_blocks = 2 * (128 / 16) + 6;  // one full sequence and a bit: forces preemption
  auto small = make_engine(kernels::Backend::cuda, tight, true);
  auto c = run_requests(*small, reqs);
  ASSERT_EQ(c.size(), reqs.size()) << "every request must finish";
  int preempted = 0;
  for (const auto& r : c) preempted += r.preemptions;
  EXPECT_GT(preempted, 0);
}

// Decode graphs are captured at start-up, one per bucket (1, 2, 4, 8, 16 for
// max_seqs 16) and head (argmax, sampling), before the first step: every op
// hooked as captured, then on_graph_captured with its kernel-node counts.
// Steps only replay: no capture inside a step, nothing instantiated mid-run.
// (Prefill graphs off here: the prefill step runs eagerly; the prefill
// graphs' own test is in engine_prefill_graphs_gpu_test.cpp.)
TEST(EngineGpu, GraphsAreCapturedAtStartUpAndStepsOnlyReplay) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  struct Hooks : Observer {
    bool in_step = false;
    int steps = 0, captured_ops = 0, captured_in_steps = 0, unknown_counts = 0;
    std::vector<GraphReplay> captures;
    std::vector<std::pair<int, int>> replays;  // step, graph
    void on_step_begin(const StepInfo&) override { in_step = true; }
    void on_step_end(const StepInfo&) override {
      in_step = false;
      ++steps;
    }
    void on_op_begin(const OpInfo& op) override {
      if (op.graph != OpInfo::kCapture) return;
      ++captured_ops;
      captured_in_steps += in_step;
    }
    void on_graph_captured(const GraphReplay& g) override {
      captures.push_back(g);
      for (int i = 0; i < g.num_ops; ++i) unknown_counts += g.ops[i].graph_kernels < 1;
    }
    void on_graph_replay(const GraphReplay& g) override { replays.emplace_back(steps, g.graph); }
  } obs;
  auto engine = make_engine(kernels::Backend::cuda, {}, true, &obs, true, /*prefill_graphs=*/false);
  ASSERT_EQ(engine->describe()["prefill_graphs"], "off");
  ASSERT_EQ(obs.captures.size(), 10u) << "5 buckets x (argmax, sample)";
  const int layers = engine->config().num_layers;
  ASSERT_EQ(engine->describe()["fusion"], "on");
  // embed, attn_norm, 5 per layer (op_table.h's decode table: qkv_rope, attention, o_proj + residual
  // + norm, gate/up + swiglu, down + residual + norm), the last layer's down_proj + mlp_residual, head
  const int ops_per_graph = 2 + 5 * layers + 1 + 3;
  for (size_t i = 0; i < obs.captures.size(); ++i) {
    EXPECT_EQ(obs.captures[i].graph, static_cast<int>(i));
    EXPECT_EQ(obs.captures[i].num_ops, ops_per_graph);
  }
  EXPECT_EQ(obs.captured_ops, 10 * ops_per_graph);
  EXPECT_EQ(obs.unknown_counts, 0) << "every captured op's kernel nodes were counted";
  const MemoryBudget& m = engine->memory_budget();
  EXPECT_EQ(m.cuda_graph_count, 10);
  EXPECT_EQ(m.kv_scratch_blocks, 1);
  std::printf("[engine-gpu] 10 decode graphs take %.2f MiB\n%s", m.cuda_graphs / 1048576.0, m.table().c_str());

  Request r;
  r.prompt = test::random_token_ids(5);
  r.max_new_tokens = 6;  // step 0 prefills, steps 1..5 decode one row
  r.stop_at_eos = false;
  engine->submit(r);
  engine->run_until_idle();
  EXPECT_EQ(obs.steps, 6);
  EXPECT_EQ(obs.captured_in_steps, 0);
  const std::vector<std::pair<int, int>> want{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}};
  EXPECT_EQ(obs.replays, want) << "every decode step replays bucket 1's argmax graph";
}

}  // namespace
}  // namespace lantern
