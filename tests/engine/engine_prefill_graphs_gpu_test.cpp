// Prefill steps replayed from CUDA graphs captured per token bucket (model.h,
// docs/engine.md "Prefill graphs") against the same engine with prefill run
// eagerly, on the tiny synthetic model: one prompt at and between buckets,
// several prompts in one step (the many-prompt class), a chunked prompt
// (head-less first chunk), and the captures themselves.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path dir = test::synth_tiny("prefill-graphs-tiny", 77);
  return dir;
}

// Counts replays of prefill graphs: graph indices from the first prefill
// graph on (the decode graphs come first).
struct PrefillReplays : Observer {
  int first_prefill = 1 << 30, replays = 0;
  void on_graph_replay(const GraphReplay& g) override { replays += g.graph >= first_prefill; }
};

std::unique_ptr<Engine> make(bool prefill_graphs, EngineLimits lim = {}, PrefillReplays* obs = nullptr) {
  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cuda;
  opt.limits = lim;
  if (opt.limits.kv_num_blocks == 0) opt.limits.kv_num_blocks = 4096;
  opt.prefill_graphs = prefill_graphs;
  opt.observer = obs;
  auto e = std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cuda), opt);
  const MemoryBudget& m = e->memory_budget();
  if (obs) obs->first_prefill = m.cuda_graph_count - m.prefill_graph_count;
  EXPECT_EQ(e->describe()["prefill_graphs"], prefill_graphs ? "on" : "off");
  return e;
}

struct Work {
  std::vector<int32_t> prompt, forced;
};
using Rows = std::map<std::pair<int, int>, std::vector<float>>;  // (request, position) -> logits

// Teacher-forced logits of every generated position. `together`: all
// requests submitted at once (their prompts prefill in one step); else one
// request at a time.
Rows run(Engine& e, const std::vector<Work>& work, bool together) {
  Rows rows;
  const int vocab = e.config().vocab_size;
  for (size_t i = 0; i < work.size(); ++i) {
    Request r;
    r.prompt = work[i].prompt;
    r.forced_tokens = work[i].forced;
    r.max_new_tokens = static_cast<int>(r.forced_tokens.size());
    r.stop_at_eos = false;
    const int tag = static_cast<int>(i);
    r.on_logits = [&rows, tag, vocab](int64_t, int pos, const float* row) {
      rows[{tag, pos}].assign(row, row + vocab);
    };
    e.submit(r);
    if (!together) e.run_until_idle();
  }
  e.run_until_idle();
  EXPECT_EQ(e.take_finished().size(), work.size());
  return rows;
}

struct Agreement {
  double worst = 0;  // rel-L2
  size_t top1 = 0, rows = 0;
};

Agreement compare(const Rows& got, const Rows& ref) {
  Agreement a;
  EXPECT_EQ(got.size(), ref.size());
  for (const auto& [key, want] : ref) {
    auto it = got.find(key);
    if (it == got.end()) {
      ADD_FAILURE() << "no logits for request " << key.first << " position " << key.second;
      continue;
    }
    const std::vector<float>& have = it->second;
    a.worst = std::max(a.worst, test::rel_l2(have, want));
    a.top1 += std::max_element(have.begin(), have.end()) - have.begin() ==
              std::max_element(want.begin(), want.end()) - want.begin();
    ++a.rows;
  }
  return a;
}

std::vector<Work> prompts(const std::vector<int>& lengths, int forced) {
  std::vector<Work> w;
  for (int n : lengths) w.push_back(Work{test::random_token_ids(n), test::random_token_ids(forced)});
  return w;
}

// At a bucket's size the replay runs the eager step's kernels on the same
// shapes: the same logits, bit for bit. Between buckets the padded GEMMs may
// tile differently (and 1..8-row prompts leave the GEMV kernels for cuBLAS at
// 16 rows): bf16 rounding, rel-L2 well under 2e-2 (an indexing error or a pad
// row leaking into a real one is O(1)).
TEST(EngineGpu, PrefillGraphsMatchEagerPrefillAtAndBetweenBuckets) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  const std::vector<Work> at = prompts({16, 32, 64, 128}, 3);
  const std::vector<Work> between = prompts({1, 5, 17, 40, 100, 130, 300, 511}, 3);
  PrefillReplays obs;
  auto graphs = make(true, {}, &obs);
  auto eager = make(false);
  const Rows at_graph = run(*graphs, at, false), at_eager = run(*eager, at, false);
  EXPECT_EQ(obs.replays, 4) << "every prefill replays a graph";
  for (const auto& [key, want] : at_eager) EXPECT_EQ(at_graph.at(key), want) << "request " << key.first;
  const Agreement b = compare(run(*graphs, between, false), run(*eager, between, false));
  EXPECT_EQ(obs.replays, 12);
  EXPECT_LT(b.worst, 2e-2);
  EXPECT_GE(b.top1, b.rows * 95 / 100);
  std::printf("[engine-gpu] prefill graphs, one prompt: bucket sizes bit-identical; between buckets "
              "worst rel-L2 %.2e, top-1 %zu/%zu\n", b.worst, b.top1, b.rows);
}

// Several prompts in one prefill step (the many-prompt class, padded to a
// token bucket with empty pad sequences), then teacher-forced decoding: any
// pad row writing K/V into a real sequence's blocks, or attention crossing
// sequences, would show in the later positions. A second round reuses the
// blocks the first freed.
TEST(EngineGpu, BatchedPrefillGraphsMatchEagerAndKeepSequencesApart) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  PrefillReplays obs;
  auto graphs = make(true, {}, &obs);
  auto eager = make(false);
  for (const std::vector<int>& lengths : {std::vector<int>{3, 17, 30, 45, 8, 60}, std::vector<int>{50, 2, 33, 90}}) {
    const std::vector<Work> w = prompts(lengths, 12);
    const int before = obs.replays;
    const Agreement a = compare(run(*graphs, w, true), run(*eager, w, true));
    EXPECT_EQ(obs.replays, before + 1) << "all prompts in one replayed prefill step";
    EXPECT_LT(a.worst, 2e-2);
    EXPECT_GE(a.top1, a.rows * 95 / 100);
    std::printf("[engine-gpu] prefill graphs, %zu prompts in one step: worst rel-L2 %.2e, top-1 %zu/%zu\n",
                lengths.size(), a.worst, a.top1, a.rows);
  }
}

// A prompt longer than a step: its first chunk is a fresh prefill without a
// logit row (the head-less graph); later chunks read the K/V it wrote.
TEST(EngineGpu, ChunkedPromptFirstChunkReplaysTheHeadlessGraph) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  EngineLimits lim;
  lim.max_batch_tokens = 64;
  PrefillReplays obs;
  auto graphs = make(true, lim, &obs);
  auto eager = make(false, lim);
  const std::vector<Work> w = prompts({150}, 6);
  const Agreement a = compare(run(*graphs, w, false), run(*eager, w, false));
  EXPECT_EQ(obs.replays, 1);
  EXPECT_LT(a.worst, 2e-2);
  EXPECT_GE(a.top1, a.rows * 95 / 100);
}

// Captured at start-up, after the decode graphs: token buckets (16 .. 512 for
// the default limits: 8) x prompt classes (1, up to 16) x heads (none,
// argmax, sample), every captured op's kernel nodes counted (what CUPTI
// attribution of replays needs); a prefill step of 5 tokens replays bucket
// 16's one-prompt argmax graph.
TEST(EngineGpu, PrefillGraphsAreCapturedAtStartUpAndPrefillStepsReplayThem) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  struct Hooks : Observer {
    bool in_step = false;
    int steps = 0, captures = 0, captured_in_steps = 0, unknown_counts = 0;
    std::vector<std::pair<int, int>> replays;  // step, graph
    void on_step_begin(const StepInfo&) override { in_step = true; }
    void on_step_end(const StepInfo&) override {
      in_step = false;
      ++steps;
    }
    void on_graph_captured(const GraphReplay& g) override {
      ++captures;
      captured_in_steps += in_step;
      for (int i = 0; i < g.num_ops; ++i) unknown_counts += g.ops[i].graph_kernels < 1;
    }
    void on_graph_replay(const GraphReplay& g) override { replays.emplace_back(steps, g.graph); }
  } obs;
  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cuda;
  opt.limits.kv_num_blocks = 1024;
  opt.observer = &obs;
  Engine engine(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cuda), opt);
  const MemoryBudget& m = engine.memory_budget();
  EXPECT_EQ(m.prefill_graph_count, 8 * 2 * 3);
  EXPECT_EQ(m.cuda_graph_count, 10 + 8 * 2 * 3);
  EXPECT_EQ(obs.captures, m.cuda_graph_count);
  EXPECT_EQ(obs.unknown_counts, 0) << "every captured op's kernel nodes were counted";
  std::printf("[engine-gpu] %d decode + %d prefill graphs take %.2f MiB\n", m.cuda_graph_count - m.prefill_graph_count,
              m.prefill_graph_count, m.cuda_graphs / 1048576.0);
  Request r;
  r.prompt = test::random_token_ids(5);
  r.max_new_tokens = 3;
  r.stop_at_eos = false;
  engine.submit(r);
  engine.run_until_idle();
  EXPECT_EQ(obs.captured_in_steps, 0);
  const std::vector<std::pair<int, int>> want{{0, 10 + 1}, {1, 0}, {2, 0}};
  EXPECT_EQ(obs.replays, want) << "prefill: graph 10 + (bucket 0, one prompt) x 3 + argmax";
}

}  // namespace
}  // namespace lantern
