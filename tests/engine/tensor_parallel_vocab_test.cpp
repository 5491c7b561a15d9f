// The vocabulary-split LM head (TpLmHead::split, --tp-lm-head split) on the
// CPU backend with simulated ranks: each rank holds V/N rows of the LM head
// (untied: only those rows are read from the file; tied: a view of the
// replicated embedding), computes its [r, V/N] part of the logits, and an
// all_gather op assembles the full rows. The logits must equal the unsharded
// engine's within 1e-5 relative L2 for prefill rows (r > 1) and decode rows
// (r = 1), tied and untied; the op table has the all_gather only when split;
// an N that does not divide the vocabulary is refused naming the N that work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/tensor_parallel.h"
#include "kernels/base/errors.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/tp_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test::random_ids;
using test::tp_config;
using test::tp_model;

// Teacher-forced over a 13-token prefill (13 logits rows in one step) and 6
// decode steps (one row each), fresh random ids; N = 1 is the one-rank gather.
TEST(TensorParallelVocab, SplitLmHeadGivesTheUnshardedLogits) {
  for (bool tied : {false, true}) {
    const ModelConfig c = tp_config(tied);
    const std::vector<int32_t> ids = random_ids(19, c.vocab_size);
    const int prefill = 13;
    const auto want = test::score_positions(*test::tp_reference(c, tp_model(tied)), ids, prefill);
    for (int world : {1, 2, 4})
      test::expect_logits_match(test::group_logits(c, world, TpLmHead::split, tp_model(tied), ids, prefill),
                                want, 0, c.vocab_size,
                                std::string("split LM head, ") + (tied ? "tied" : "untied") +
                                    ", N=" + std::to_string(world));
  }
}

// Several requests at once: batched decode steps have r > 1 logits rows
// (the gather-then-reorder path), greedy and sampled rows; tokens equal the
// unsharded engine's.
TEST(TensorParallelVocab, SplitLmHeadGeneratesTheUnshardedTokens) {
  for (bool tied : {false, true}) {
    const ModelConfig c = tp_config(tied);
    const std::vector<Request> reqs = test::three_requests(c.vocab_size, /*sample_last=*/true);
    auto run = [&](Engine& e) {
      for (const Request& r : reqs) e.submit(r);
      e.run_until_idle();
      return test::finished_tokens(e, reqs.size());
    };
    test::expect_group_generates_reference_tokens(c, TpLmHead::split, tp_model(tied), reqs.size(), run,
                                                  tied ? "tied " : "untied ");
  }
}

TEST(TensorParallelVocab, OpTableHasAnAllGatherOnlyWithASplitLmHead) {
  for (bool fused : {false, true})
    for (int parts : {0, 1, 2}) {
      SCOPED_TRACE(testing::Message() << (fused ? "fused" : "unfused") << " parts " << parts);
      Arena arena;
      const ActivationViews v =
          declare_activations(arena, activation_layout(tp_config(), 8, 2, 4, 64, fused, parts));
      EXPECT_EQ(v.split_lm_head(), parts > 0);
      const OpTable table(2, v, true);
      for (auto head : {StepKind::none, StepKind::argmax, StepKind::sample}) {
        const auto& ops = table.ops(StepKind{StepKind::decode, head});
        int gathers = 0;
        for (size_t i = 0; i < ops.size(); ++i) {
          if (ops[i].kind != OpKind::all_gather) continue;
          ++gathers;
          EXPECT_STREQ(ops[i].name, "all_gather");
          ASSERT_GT(i, 0u);
          EXPECT_EQ(ops[i - 1].kind, OpKind::lm_head);
          EXPECT_EQ(ops[i - 1].writes[0], v.logits_part);
          EXPECT_EQ(ops[i].reads[0], v.logits_part);
          EXPECT_EQ(ops[i].writes[0], v.logits_gather);
          EXPECT_EQ(ops[i].writes[1], v.logits);
          EXPECT_EQ(ops[i + 1].reads[0], v.logits);  // argmax / sample read the full rows
        }
        EXPECT_EQ(gathers, parts > 0 && head != StepKind::none ? 1 : 0);
      }
    }
  // The part and the gather scratch are arena views the memory map shows.
  Arena arena;
  declare_activations(arena, activation_layout(tp_config(), 8, 3, 4, 64, true, 4));
  auto bytes_of = [&arena](const char* view) {
    return arena.buffers().at(arena.views().at(arena.find(view)).buffer).bytes;
  };
  EXPECT_EQ(bytes_of("logits_part"), 3u * 64 * 4);  // [3 rows, 256 / 4] f32
  EXPECT_EQ(bytes_of("logits_gather"), 4u * 3 * 64 * 4);
}

TEST(TensorParallelVocab, RefusesAnNThatDoesNotDivideTheVocabulary) {
  ModelConfig c = tp_config();
  c.vocab_size = 250;  // N = 2 divides it, N = 4 does not
  EXPECT_EQ(valid_tp_sizes(c, TpLmHead::split), (std::vector<int>{1, 2}));
  EXPECT_NO_THROW(check_shardable(c, 4, TpLmHead::replicated));
  try {
    check_shardable(c, 4, TpLmHead::split);
    ADD_FAILURE() << "N=4 accepted for a vocabulary of 250";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--tp 4 --tp-lm-head split cannot split this model's vocabulary"));
    EXPECT_THAT(e.what(), HasSubstr("vocab_size=250; use --tp one of 1, 2, or --tp-lm-head replicated"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  try {  // the heads are in the way as well: the list honours both
    check_shardable(c, 3, TpLmHead::split);
    ADD_FAILURE() << "N=3 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("use --tp one of 1, 2"));
  }
  EXPECT_EQ(parse_tp_lm_head("split"), TpLmHead::split);
  EXPECT_THROW(parse_tp_lm_head("vocab"), Error);
  // The loader and the engine refuse it too.
  const ModelConfig real = tp_config();
  EXPECT_THROW(Weights::load(real, tp_model(), kernels::Backend::cpu, {}, 0, ShardSpec{0, 3, TpLmHead::split}),
               Error);
  // Weights loaded replicated cannot run a split engine.
  auto comms = make_local_group(1);
  EngineOptions o = test::tp_cpu_options();
  o.comm = comms[0].get();
  o.tp_lm_head = TpLmHead::split;
  try {
    Engine e(real, Weights::load(real, tp_model(), kernels::Backend::cpu, {}, 0, ShardSpec{0, 1}), o);
    ADD_FAILURE() << "a replicated LM head accepted by a split engine";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the weights hold a replicated LM head"));
  }
}

// Untied: rank r's lm_head view is rows [r·V/N, (r+1)·V/N) of the file's
// lm_head.weight. Tied: no LM-head view at all; the pointer is the
// embedding's row r·V/N (same bytes, no copy).
TEST(TensorParallelVocab, LoaderHoldsTheRanksVocabularyRows) {
  for (bool tied : {false, true}) {
    const ModelConfig c = tp_config(tied);
    const SafetensorsModel m = open_safetensors_model(tp_model(tied));
    const SafetensorsEntry* e = m.find(tied ? "model.embed_tokens.weight" : "lm_head.weight");
    ASSERT_NE(e, nullptr);
    const std::string full = test::tensor_file_bytes(*e);
    const size_t row = static_cast<size_t>(c.hidden_size) * 2;
    for (int world : {2, 4})
      for (int rank = 0; rank < world; ++rank) {
        const ShardSpec s{rank, world, TpLmHead::split};
        Weights w = Weights::load(c, tp_model(tied), kernels::Backend::cpu, {}, 0, s);
        const size_t rows = c.vocab_size / world;
        EXPECT_EQ(std::memcmp(w.lm_head, full.data() + rank * rows * row, rows * row), 0)
            << (tied ? "tied" : "untied") << " rank " << rank << "/" << world;
        if (tied) {
          EXPECT_EQ(static_cast<const char*>(w.lm_head), static_cast<const char*>(w.embed) + rank * rows * row);
          continue;
        }
        const WeightView& v = w.views().back();
        EXPECT_EQ(v.name, "lm_head.weight");
        EXPECT_EQ(v.shape, (std::vector<int64_t>{static_cast<int64_t>(rows), c.hidden_size}));
        EXPECT_EQ(v.bytes, rows * row);
      }
  }
}

}  // namespace
}  // namespace lantern
