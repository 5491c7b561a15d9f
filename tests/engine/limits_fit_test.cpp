// Limits that cannot fit: sizes in 64 bits, the message says what would fit
// (issue 15's probe: --max-batch-tokens 2147483647 aborted with a double free).
#include "engine/limits_fit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "engine/arena.h"
#include "engine/engine.h"
#include "engine/op_table.h"
#include "engine/tensor_parallel.h"
#include "tests/engine/model_fixtures.h"

namespace lantern {
namespace {

using ::testing::HasSubstr;

std::string fit_error(const ModelConfig& cfg, const EngineLimits& l, uint64_t available) {
  try {
    check_limits_fit(cfg, l, 2, available, "the device memory free after the weights");
  } catch (const Error& e) {
    return e.what();
  }
  return "(fits)";
}

TEST(LimitsFit, ArenaBytesAreExactForTheLlama1bShapesAndSaturate) {
  ModelConfig cfg = ModelConfig::from_json(test::llama32_1b_config_json());
  EngineLimits l;
  l.max_batch_tokens = 512;
  l.max_seqs = 16;
  // Per row (the fused layout, the larger): 3*2048 (x, xn, o) + 2048 (q) + 2048 + 2*512
  // (qkv) + 3*8192 (gate_up, act), bf16, plus 24 bytes of step metadata; 16 logits
  // rows of 2048 bf16 + 128256 f32, 40 bytes of step metadata and the pruned
  // last layer's head_x and head_q (2 x 2048 bf16).
  const uint64_t per_row = (3 * 2048 + 2048 + 2048 + 2 * 512 + 3 * 8192) * 2 + 24;
  EXPECT_EQ(arena_bytes_needed(cfg, l, 2), 512 * per_row + 16 * (2048 * 2 + 128256 * 4 + 40 + 2 * 2048 * 2));
  l.max_batch_tokens = 2147483647;
  l.max_seqs = 2147483647;
  EXPECT_GT(arena_bytes_needed(cfg, l, 2), uint64_t{1} << 40);  // no 32-bit wrap
}

TEST(LimitsFit, RefusesWhatDoesNotFitAndSaysWhatWould) {
  ModelConfig cfg = ModelConfig::from_json(test::llama32_1b_config_json());
  EngineLimits l;
  l.max_seqs = 16;
  l.max_batch_tokens = 512;
  const uint64_t gib = 1ull << 30;
  EXPECT_EQ(fit_error(cfg, l, 80 * gib), "(fits)");
  for (int bad : {16777216, 536870912, 1073741824, 2147483647}) {
    l.max_batch_tokens = bad;
    std::string e = fit_error(cfg, l, 80 * gib);
    EXPECT_THAT(e, HasSubstr("limit max_batch_tokens=" + std::to_string(bad) + " needs")) << bad;
    EXPECT_THAT(e, HasSubstr("the device memory free after the weights holds 80.00 GiB"));
    // What would fit, and that it does fit.
    auto at = e.find("max_batch_tokens <= ");
    ASSERT_NE(at, std::string::npos) << e;
    EngineLimits ok = l;
    ok.max_batch_tokens = std::stoi(e.substr(at + 20));
    EXPECT_GT(ok.max_batch_tokens, 512);
    EXPECT_EQ(fit_error(cfg, ok, 80 * gib), "(fits)");
    ok.max_batch_tokens += 1;
    EXPECT_NE(fit_error(cfg, ok, 80 * gib), "(fits)");
  }
}

// --tp-lm-head split over N ranks: each rank's logits part [R, V/N] and the
// all_gather's scratch [N, R, V/N] (f32) come on top of the full logits rows;
// the estimate grows by exactly the bytes of the two views the engine
// declares (activation_layout), and a budget that holds the replicated arena
// but not the split one is refused.
TEST(LimitsFit, ASplitLmHeadCountsItsLogitsPartAndGather) {
  const ModelConfig cfg = shard_config(ModelConfig::from_json(test::llama32_1b_config_json()),
                                       ShardSpec{0, 2, TpLmHead::split});
  EngineLimits l;
  l.max_batch_tokens = 512;
  l.max_seqs = 16;
  const uint64_t plain = arena_bytes_needed(cfg, l, 2);
  for (int parts : {1, 2, 4}) {
    SCOPED_TRACE(parts);
    const uint64_t part = 16ull * (128256 / parts) * 4;  // [16 logits rows, V/N] f32
    const uint64_t split = arena_bytes_needed(cfg, l, 2, parts);
    EXPECT_EQ(split, plain + part + parts * part);
    Arena arena;
    declare_activations(arena, activation_layout(cfg, 512, 16, 2, 64, true, parts));
    uint64_t declared = 0;
    for (const char* view : {"logits_part", "logits_gather"})
      declared += arena.buffers().at(arena.views().at(arena.find(view)).buffer).bytes;
    EXPECT_EQ(split - plain, declared);
    try {
      check_limits_fit(cfg, l, 2, split - 1, "the device memory free after the weights", parts);
      ADD_FAILURE() << "an arena one byte too large was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("limit max_batch_tokens=512 needs"));
    }
    EXPECT_NO_THROW(check_limits_fit(cfg, l, 2, split, "the device memory free after the weights", parts));
    EXPECT_NO_THROW(check_limits_fit(cfg, l, 2, split - 1, "the device memory free after the weights"));
  }
  l.max_batch_tokens = l.max_seqs = 2147483647;  // 64-bit sums: no wrap
  EXPECT_GT(arena_bytes_needed(cfg, l, 2, 2), arena_bytes_needed(cfg, l, 2));
}

}  // namespace
}  // namespace lantern
