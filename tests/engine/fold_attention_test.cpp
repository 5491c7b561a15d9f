// Two decode-step op-table changes of session 33 on the CPU reference backend
// with the tiny synthetic model (docs/engine.md, Decode): the folded decode
// attention (StepKind::fold, the qkv_attention op) and the final norm fused
// into the last layer (StepKind::fuse_final). On the CPU each fused op runs
// exactly the references of the ops it replaces, in the same order, so every
// logits row must be bit-identical to the full table's; the observer shows
// which op ran in which step.
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "tests/engine/engine_test_util.h"

namespace lantern {
namespace {

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path dir = test::synth_tiny("fold-tiny", 4321);
  return dir;
}

struct Count : Observer {
  std::map<std::string, int> ops;
  void on_op_begin(const OpInfo& op) override { ++ops[op.op]; }
};

std::unique_ptr<Engine> make(const std::string& fold, int fold_max_context, Observer* obs,
                             const std::string& final_fuse = "off") {
  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cpu;
  opt.limits.max_batch_tokens = 24;  // chunked prompts and mixed steps beside the decode steps
  opt.limits.max_seqs = 4;
  opt.limits.logits_rows = 8;
  opt.limits.max_context = 256;
  opt.kernels = {{"fold_attention", fold}, {"final_fuse", final_fuse}};
  opt.fold_max_context = fold_max_context;
  opt.observer = obs;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cpu), opt);
}

// Teacher-forced requests of several lengths: decode steps of 1-4 rows with
// contexts from 2 to ~90, mixed with prompt chunks.
test::ForcedWork work() {
  test::ForcedWork w;
  for (int i = 0; i < 6; ++i) w.emplace_back(test::random_token_ids(1 + 13 * i), test::random_token_ids(4 + 2 * i));
  return w;
}

TEST(FoldAttentionCpu, FoldedDecodeStepsGiveTheSameLogits) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  Count folded_ops, full_ops;
  auto folded = make("on", 512, &folded_ops), full = make("off", 512, &full_ops);
  EXPECT_EQ(folded->describe()["fold_attention"], "on");
  EXPECT_EQ(folded->describe()["fold_max_context"], 512);
  EXPECT_EQ(full->describe()["fold_attention"], "off");
  const test::ForcedWork w = work();
  test::LogitRows a, b;
  ASSERT_EQ(test::run_forced(*folded, w, a), w.size());
  ASSERT_EQ(test::run_forced(*full, w, b), w.size());
  EXPECT_GE(b.size(), 30u);
  EXPECT_EQ(test::differing_rows(a, b), 0u) << "the folded op runs the same CPU kernels";
  // Decode-kind steps: every layer folds but a pruned last layer (a continuing
  // chunk with fewer logit rows than rows), whose attention is attention_head's.
  EXPECT_GT(folded_ops.ops["qkv_attention"], 0);
  EXPECT_EQ(folded_ops.ops["attention_decode"], 0) << "every decode-kind step folds (contexts <= 256)";
  EXPECT_EQ(full_ops.ops["qkv_attention"], 0);
  EXPECT_EQ(folded_ops.ops["qkv_attention"] + folded_ops.ops["qkv_rope"], full_ops.ops["qkv_rope"]);
  EXPECT_EQ(folded_ops.ops["qkv_attention"], full_ops.ops["attention_decode"]);
  EXPECT_EQ(folded_ops.ops["attention_head"], full_ops.ops["attention_head"]);
  EXPECT_EQ(folded_ops.ops["attention_prefill"] + folded_ops.ops["attention"],
            full_ops.ops["attention_prefill"] + full_ops.ops["attention"])
      << "prompt and mixed steps keep their tables";
}

// fold_max_context: a decode step folds only when every row's context fits;
// the others run the full table, and the logits do not change. A short
// request alone (contexts 6-15), then a long one (31-40), bound 20.
TEST(FoldAttentionCpu, OnlyStepsWithinTheContextBoundFold) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  Count some_ops;
  auto some = make("on", 20, &some_ops), full = make("off", 20, nullptr);
  const test::ForcedWork short_one = {{test::random_token_ids(5), test::random_token_ids(10)}};
  const test::ForcedWork long_one = {{test::random_token_ids(30), test::random_token_ids(10)}};
  test::LogitRows a, b;
  ASSERT_EQ(test::run_forced(*some, short_one, a), 1u);
  ASSERT_EQ(test::run_forced(*full, short_one, b), 1u);
  const int short_folds = some_ops.ops["qkv_attention"];
  EXPECT_GT(short_folds, 0) << "the short request's decode steps fold";
  EXPECT_EQ(some_ops.ops["attention_decode"], 0);
  ASSERT_EQ(test::run_forced(*some, long_one, a), 1u);
  ASSERT_EQ(test::run_forced(*full, long_one, b), 1u);
  EXPECT_EQ(some_ops.ops["qkv_attention"], short_folds) << "contexts above 20 do not fold";
  EXPECT_GT(some_ops.ops["attention_decode"], 0);
  EXPECT_EQ(test::differing_rows(a, b), 0u);
}

// "auto" folds only with a variant made for it: the CPU reference is not.
// A bad value is a clear error naming the fix.
TEST(FoldAttentionCpu, AutoFollowsTheVariantAndBadValuesAreRejected) {
  EXPECT_EQ(make("auto", 512, nullptr)->describe()["fold_attention"], "off");
  EXPECT_EQ(make("on", 0, nullptr)->describe()["fold_attention"], "off") << "a bound of 0 never folds";
  try {
    make("maybe", 512, nullptr);
    FAIL() << "fold_attention=maybe was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fold_attention must be 'auto', 'on' or 'off'"), std::string::npos)
        << e.what();
  }
}

// final_fuse=on: steps whose rows are all logit rows in order (pure decode
// steps here) end the last layer with down_proj_residual_norm and the final
// norm; prompt and mixed steps keep down_proj, mlp_residual and final_norm.
// With and without the fold.
TEST(FinalFuseCpu, DecodeStepsEndTheLastLayerWithTheFinalNorm) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  const test::ForcedWork w = work();
  test::LogitRows ref;
  Count full_ops;
  auto full = make("off", 512, &full_ops);
  ASSERT_EQ(test::run_forced(*full, w, ref), w.size());
  EXPECT_EQ(full->describe()["final_fuse"], "off");
  for (const char* fold : {"off", "on"}) {
    SCOPED_TRACE(std::string("fold_attention=") + fold);
    Count ops;
    auto fused = make(fold, 512, &ops, "on");
    EXPECT_EQ(fused->describe()["final_fuse"], "on");
    test::LogitRows got;
    ASSERT_EQ(test::run_forced(*fused, w, got), w.size());
    EXPECT_EQ(test::differing_rows(got, ref), 0u) << "the fused op runs the same CPU references";
    const int layers = fused->config().num_layers;
    const int folded_away = full_ops.ops["final_norm"] - ops.ops["final_norm"];
    EXPECT_GT(folded_away, 0) << "decode steps skip final_norm";
    EXPECT_EQ(full_ops.ops["mlp_residual"] - ops.ops["mlp_residual"], folded_away);
    EXPECT_EQ(full_ops.ops["down_proj"] - ops.ops["down_proj"], folded_away);
    EXPECT_EQ(ops.ops["down_proj_residual_norm"] - full_ops.ops["down_proj_residual_norm"], folded_away);
    EXPECT_GT(ops.ops["final_norm"], 0) << "prompt and mixed steps keep it";
    EXPECT_EQ(full_ops.ops["down_proj_residual_norm"] % (layers - 1), 0);
  }
}

}  // namespace
}  // namespace lantern
