// The folded decode attention (StepKind::fold, the qkv_attention op;
// docs/engine.md) in the CUDA engine, on a small synthetic model whose
// attention fits qkv_rope.4's tail (8 q / 2 kv heads of 64): teacher-forced
// logits of graph-replayed decode steps of 1-10 rows (up to 8 rows the tail
// runs the attention in the q/k/v GEMV's launch; 9-10 rows fall back to
// qkv_rope.3 + attention_decode inside the op), contexts up to ~400 (folded)
// and one request past fold_max_context (its steps run the full table).
//  - fold_attention=on with qkv_rope.3 runs the same kernels as the default
//    table in one op: every logit bit-identical.
//  - qkv_rope.4 (fold_attention=auto folds with it): the attention sums in
//    another order, so logits agree to rounding (worst rel-L2 2e-2, top-1
//    the same at >= 98 % of positions: synthetic logits have near ties).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

// The tiny preset with Llama-3.2-1B's head shape: 8 q / 2 kv heads of 64.
const std::filesystem::path& hd64_model() {
  static const std::filesystem::path dir = [] {
    auto d = test::scratch_dir("fold-gpu-hd64");
    ModelConfig cfg = synth_preset("tiny");
    cfg.hidden_size = 512;
    cfg.intermediate_size = 1024;
    cfg.num_q_heads = 8;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 64;
    SynthOptions opt;
    opt.seed = 77;
    opt.with_tokenizer = false;
    write_synthetic_model(cfg, d, opt);
    return d;
  }();
  return dir;
}

struct Count : Observer {
  std::map<std::string, int> ops;
  void on_op_begin(const OpInfo& op) override { ++ops[op.op]; }
};

using Kernels = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<Engine> make(Kernels kernels, Observer* obs = nullptr) {
  ModelConfig cfg = ModelConfig::load(hd64_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cuda;
  opt.limits.kv_num_blocks = 16384;
  opt.kernels = std::move(kernels);
  opt.observer = obs;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, hd64_model(), opt.backend), opt);
}

int argmax(const std::vector<float>& row) {
  return int(std::max_element(row.begin(), row.end()) - row.begin());
}

// How far c's logits rows are from a's (the same keys): the worst rel-L2, the
// positions whose top-1 differs, and of the positions where a's top-1 leads
// its runner-up by more than kMarginTol of the row's rms (clear winners: a
// rounding-level difference, ~1e-2 of the rms, cannot flip them) how many
// there are and how many differ.
constexpr double kMarginTol = 0.1;
struct Agreement {
  double worst = 0;
  size_t top1_differ = 0, clear = 0, clear_differ = 0;
};
Agreement agreement(const test::LogitRows& a, const test::LogitRows& c) {
  Agreement g;
  EXPECT_EQ(c.size(), a.size());
  for (const auto& [key, ref] : a) {
    const auto it = c.find(key);
    if (it == c.end()) {
      ADD_FAILURE() << "request " << key.first << " position " << key.second << " missing";
      continue;
    }
    g.worst = std::max(g.worst, test::rel_l2(it->second, ref));
    const int top = argmax(ref);
    double rms = 0, runner_up = -INFINITY;
    for (size_t i = 0; i < ref.size(); ++i) {
      rms += double(ref[i]) * ref[i];
      if (int(i) != top) runner_up = std::max(runner_up, double(ref[i]));
    }
    rms = std::sqrt(rms / double(ref.size()));
    const bool differ = argmax(it->second) != top, clear = ref[top] - runner_up > kMarginTol * rms;
    g.top1_differ += differ;
    g.clear += clear;
    g.clear_differ += clear && differ;
  }
  return g;
}

TEST(FoldAttentionGpu, FoldedStepsAgreeWithTheFullTable) {
  LANTERN_REQUIRE_GPU();
  test::ForcedWork work;
  for (int i = 0; i < 9; ++i) work.emplace_back(test::random_token_ids(1 + 37 * i), test::random_token_ids(12 + 3 * i));
  work.emplace_back(test::random_token_ids(520), test::random_token_ids(8));  // contexts past the bound
  Count tail_ops;
  auto plain = make({}), composed = make({{"fold_attention", "on"}, {"qkv_rope", "3"}}),
       tail = make({{"qkv_rope", "4"}}, &tail_ops);
  ASSERT_EQ(plain->describe()["fold_attention"], "off") << "the default variant does not fold";
  ASSERT_EQ(composed->describe()["fold_attention"], "on");
  ASSERT_EQ(tail->describe()["fold_attention"], "on") << "auto folds with qkv_rope.4";
  test::LogitRows a, b, c;
  ASSERT_EQ(test::run_forced(*plain, work, a), work.size());
  ASSERT_EQ(test::run_forced(*composed, work, b), work.size());
  ASSERT_EQ(test::run_forced(*tail, work, c), work.size());
  EXPECT_EQ(test::differing_rows(b, a), 0u) << "the composed fold runs the default kernels";
  const Agreement g = agreement(a, c);
  EXPECT_LT(g.worst, 2e-2);
  EXPECT_EQ(g.clear_differ, 0u) << "top-1 differs where the full table's leads by > " << kMarginTol << " rms";
  EXPECT_GE(g.clear, a.size() / 2) << "most positions have a clear winner (else the check above is empty)";
  EXPECT_GT(tail_ops.ops["qkv_attention"], 0);
  EXPECT_GT(tail_ops.ops["attention_decode"], 0) << "the long request's steps keep the full table";
  std::printf("[engine-gpu] qkv_rope.4 folded vs the full table: %zu positions, worst rel-L2 %.2e, top-1 differs "
              "at %zu (at %zu of the %zu with a clear winner); %d qkv_attention ops\n",
              a.size(), g.worst, g.top1_differ, g.clear_differ, g.clear, tail_ops.ops["qkv_attention"]);
}

// final_fuse=on (StepKind::fuse_final): graph-replayed decode steps end the
// last layer with down_proj_residual_norm and the final norm (the GEMV's
// residual-norm tail up to 16 rows, cuBLASLt + add_rmsnorm above) instead of
// down_proj, mlp_residual and final_norm: the same sums, the norm's in
// add_rmsnorm's order, so the logits agree to rounding.
TEST(FoldAttentionGpu, FinalNormInTheLastLayerAgreesWithTheSeparateOps) {
  LANTERN_REQUIRE_GPU();
  test::ForcedWork work;
  for (int i = 0; i < 20; ++i) work.emplace_back(test::random_token_ids(1 + 11 * i), test::random_token_ids(10 + i));
  Count fused_ops;
  auto plain = make({}), fused = make({{"final_fuse", "on"}}, &fused_ops);
  ASSERT_EQ(fused->describe()["final_fuse"], "on");
  test::LogitRows a, c;
  ASSERT_EQ(test::run_forced(*plain, work, a), work.size());
  ASSERT_EQ(test::run_forced(*fused, work, c), work.size());
  const Agreement g = agreement(a, c);
  EXPECT_LT(g.worst, 1e-2);
  EXPECT_LE(g.top1_differ, a.size() / 50) << "of " << a.size() << " positions";
  EXPECT_GT(fused_ops.ops["down_proj_residual_norm"], 0);
  std::printf("[engine-gpu] final norm in the last layer vs separate: %zu positions, worst rel-L2 %.2e, top-1 "
              "differs at %zu\n",
              a.size(), g.worst, g.top1_differ);
}

}  // namespace
}  // namespace lantern
