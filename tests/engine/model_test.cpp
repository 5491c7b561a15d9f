// Model on the CPU backend with the tiny synthetic model: the memory budget
// it reports matches the sizes the limits imply, and one prefill step plus
// one decode step driven by hand (KvBlockManager + StepInput, no scheduler)
// give the logits the whole engine gives for the same ids.
#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/device.h"
#include "engine/kv_cache.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path dir = test::synth_tiny("model-tiny", 4321);
  return dir;
}

EngineLimits small_limits() {
  EngineLimits l;
  l.max_batch_tokens = 32;
  l.max_seqs = 2;
  l.max_context = 64;
  l.kv_block_size = 16;
  l.logits_rows = 2;
  return l;
}

struct CpuModel {
  ModelConfig cfg = ModelConfig::load(tiny_model());
  Weights weights = Weights::load(cfg, tiny_model(), kernels::Backend::cpu);
  Device device{kernels::Backend::cpu};
  EngineLimits limits = small_limits();
  Model model{cfg, weights, device, limits, kernels::KernelSet::defaults(kernels::Backend::cpu),
              nullptr, /*use_cuda_graphs=*/false};
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

TEST(ModelCpu, BudgetIsWhatTheLimitsImply) {
  CpuModel m;
  const ModelConfig& c = m.cfg;
  const EngineLimits& l = m.limits;
  const size_t f32 = 4, T = l.max_batch_tokens, H = c.hidden_size, I = c.intermediate_size;
  // The buffers of the architecture's op table, float activations on the CPU.
  const std::map<std::string, size_t> expect = {
      {"x", T * H * f32},          {"xn", T * H * f32},
      {"q_attn", T * c.q_dim() * f32}, {"k", T * c.kv_dim() * f32},
      {"v", T * c.kv_dim() * f32}, {"o_down", T * H * f32},
      {"gate", T * I * f32},       {"up", T * I * f32},
      {"mlp_act", T * I * f32},    {"logits_in", l.logits_rows * H * f32},
      {"logits", static_cast<size_t>(l.logits_rows) * c.vocab_size * f32},
      {"rope_inv_freq", c.head_dim / 2 * f32}};
  const Arena& a = m.model.arena();
  size_t laid_out = 0;
  for (const ArenaBuffer& b : a.buffers()) {
    EXPECT_EQ(b.offset, laid_out) << b.name;
    laid_out = align256(laid_out + b.bytes);
    auto it = expect.find(b.name);
    if (it != expect.end()) {
      EXPECT_EQ(b.bytes, it->second) << b.name;
    }
  }
  for (const auto& [name, bytes] : expect)
    EXPECT_NO_THROW(a.find(name == "q_attn" ? "q" : name == "o_down" ? "o_out" : name)) << name;
  const MemoryBudget& b = m.model.budget();
  EXPECT_EQ(b.arena, laid_out);
  EXPECT_EQ(b.arena, a.total_bytes());
  EXPECT_EQ(b.weights, m.weights.bytes());
  // CPU: every slot at full context, each layer its own blocks.
  const int blocks_per_seq = (l.max_context + l.kv_block_size - 1) / l.kv_block_size;
  EXPECT_EQ(m.model.max_blocks_per_seq(), blocks_per_seq);
  EXPECT_EQ(b.kv_blocks, l.max_seqs * c.num_layers * blocks_per_seq);
  EXPECT_EQ(m.model.kv_num_blocks(), b.kv_blocks);
  EXPECT_EQ(b.kv_pool, static_cast<size_t>(b.kv_blocks) * 2 * l.kv_block_size * c.num_kv_heads *
                           c.head_dim * f32);
  EXPECT_EQ(b.block_tables,
            // one row per slot plus the scratch slot (graph padding rows; docs/architecture.md)
            static_cast<size_t>(c.num_layers) * (l.max_seqs + 1) * blocks_per_seq * sizeof(int32_t));
  EXPECT_EQ(b.total(), b.weights + b.arena + b.kv_pool + b.workspace + b.block_tables +
                           b.cuda_graphs);
  EXPECT_NE(b.table().find("(" + std::to_string(b.kv_blocks) + " blocks)"), std::string::npos)
      << b.table();
}

StepInput one_sequence_step(const std::vector<int32_t>& tokens, int first_position, bool fresh) {
  StepInput in;
  in.tokens = tokens;
  const int n = static_cast<int>(tokens.size());
  for (int i = 0; i < n; ++i) in.positions.push_back(first_position + i);
  in.slots.assign(n, 0);
  in.fresh_starts = fresh ? std::vector<int32_t>{0, n} : std::vector<int32_t>{0};
  in.max_fresh_len = fresh ? n : 0;
  in.logit_rows = {n - 1};
  in.temperature = {0.0f};
  in.top_p = {1.0f};
  in.top_k = {0};
  in.gen_index = {0};
  in.seeds = {0};
  in.copy_logits = true;
  return in;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

TEST(ModelCpu, PrefillAndDecodeStepsMatchTheEngine) {
  CpuModel m;
  const int vocab = m.cfg.vocab_size;
  KvBlockManager kv(m.model.kv_num_blocks(), m.limits.kv_block_size, m.cfg.num_layers,
                    m.limits.max_seqs, m.model.max_blocks_per_seq());
  const std::vector<int32_t> prompt = test::random_token_ids(9);
  const int n = static_cast<int>(prompt.size());

  kv.grow(0, /*seq_id=*/7, n, /*step=*/0);
  StepInput prefill = one_sequence_step(prompt, 0, /*fresh=*/true);
  prefill.table_updates = kv.take_table_updates();
  ASSERT_EQ(prefill.table_updates.size(), static_cast<size_t>(m.cfg.num_layers));  // 1 block/layer
  StepOutput first = m.model.run(prefill);
  ASSERT_EQ(first.tokens.size(), 1u);
  ASSERT_EQ(first.logits.size(), static_cast<size_t>(vocab));
  const int32_t greedy = static_cast<int32_t>(
      std::max_element(first.logits.begin(), first.logits.end()) - first.logits.begin());
  EXPECT_EQ(first.tokens[0], greedy);

  kv.grow(0, 7, n + 1, 1);
  StepInput decode = one_sequence_step({greedy}, n, /*fresh=*/false);
  decode.table_updates = kv.take_table_updates();
  EXPECT_TRUE(decode.table_updates.empty()) << "position 9 is still in the first block";
  StepOutput second = m.model.run(decode);
  ASSERT_EQ(second.logits.size(), static_cast<size_t>(vocab));

  // The engine (scheduler, its own KV manager and model) on fresh weights.
  EngineOptions opt;
  opt.backend = kernels::Backend::cpu;
  opt.limits = small_limits();
  Engine engine(m.cfg, Weights::load(m.cfg, tiny_model(), kernels::Backend::cpu), opt);
  std::vector<int32_t> ids = prompt;
  ids.push_back(greedy);
  const auto rows = test::score_positions(engine, ids, n);
  ASSERT_EQ(rows.size(), ids.size());
  ASSERT_EQ(rows[n - 1].size(), static_cast<size_t>(vocab));
  ASSERT_EQ(rows[n].size(), static_cast<size_t>(vocab));
  // Same kernels, same order of accumulation per element: equal up to float
  // rounding (the engine computes logits for every row, the model for one).
  EXPECT_LE(max_abs_diff(first.logits, rows[n - 1]), 1e-4f);
  EXPECT_LE(max_abs_diff(second.logits, rows[n]), 1e-4f);
  EXPECT_GT(max_abs_diff(first.logits, second.logits), 1e-3f) << "the two steps must differ";
}

// The deferred-norm table on the CPU (op_table.h; proj_residual_norm.4 on the
// GPU): a copy of proj_residual_norm.0's entry marked defers_norm makes the
// model build it. gemm.0 and gate_up_swiglu.0 then get the norm run ahead of
// them by kernels::launch (rmsnorm.0 on x; they have no prologue) and
// proj_residual_norm.0 runs with out == nullptr (gemm, then residual.0 only)
// -- the same fp32 operations in the same order as the plain fused table's
// add_rmsnorm.0 (residual.0, then rmsnorm.0), so a prefill and a decode step
// give bit-identical logits. A deferral that dropped a norm or used the wrong
// layer's weight would move them by far more.
TEST(ModelCpu, DeferredNormTableGivesTheSameLogits) {
  const ModelConfig cfg = ModelConfig::load(tiny_model());
  const Weights weights = Weights::load(cfg, tiny_model(), kernels::Backend::cpu);
  ASSERT_TRUE(weights.fusable());
  kernels::KernelSet plain = kernels::KernelSet::defaults(kernels::Backend::cpu);
  kernels::KernelEntry deferring = plain.entry(kernels::Family::proj_residual_norm);
  ASSERT_FALSE(deferring.defers_norm);
  deferring.defers_norm = true;
  kernels::KernelSet with_defer = plain;
  with_defer.chosen[static_cast<int>(kernels::Family::proj_residual_norm)] = &deferring;
  const EngineLimits limits = small_limits();
  const std::vector<int32_t> prompt = test::random_token_ids(11);
  const int n = static_cast<int>(prompt.size());
  std::vector<std::vector<float>> logits[2];
  for (int d = 0; d < 2; ++d) {
    Device device{kernels::Backend::cpu};
    Model model{cfg, weights, device, limits, d ? with_defer : plain, nullptr, /*use_cuda_graphs=*/false,
                /*fused=*/true};
    ASSERT_EQ(model.op_table().defer_norm(), d == 1);
    KvBlockManager kv(model.kv_num_blocks(), limits.kv_block_size, cfg.num_layers, limits.max_seqs,
                      model.max_blocks_per_seq());
    kv.grow(0, 3, n, 0);
    StepInput prefill = one_sequence_step(prompt, 0, /*fresh=*/true);
    prefill.table_updates = kv.take_table_updates();
    const StepOutput first = model.run(prefill);
    kv.grow(0, 3, n + 1, 1);
    StepInput decode = one_sequence_step({first.tokens[0]}, n, /*fresh=*/false);
    decode.table_updates = kv.take_table_updates();
    const StepOutput second = model.run(decode);
    logits[d] = {first.logits, second.logits};
  }
  ASSERT_EQ(logits[0][0].size(), static_cast<size_t>(cfg.vocab_size));
  EXPECT_EQ(max_abs_diff(logits[0][0], logits[1][0]), 0.0f) << "prefill step";
  EXPECT_EQ(max_abs_diff(logits[0][1], logits[1][1]), 0.0f) << "decode step";
  EXPECT_GT(max_abs_diff(logits[0][0], logits[0][1]), 1e-3f) << "the two steps must differ";
}

// The per-step shared-memory carveout policy (model.h): 50 % for one-row
// steps, the driver's choice above; a thread's setting is its own.
TEST(ModelCpu, SmallBatchCarveoutCoversOneRowSteps) {
  if (std::getenv("LANTERN_SMALL_BATCH_CARVEOUT")) GTEST_SKIP() << "LANTERN_SMALL_BATCH_CARVEOUT overrides the default";
  EXPECT_EQ(small_batch_carveout(1), 50);
  EXPECT_EQ(small_batch_carveout(2), -1);
  EXPECT_EQ(small_batch_carveout(256), -1);
  EXPECT_EQ(kernels::launch_carveout(), -1);
  kernels::set_launch_carveout(30);
  EXPECT_EQ(kernels::launch_carveout(), 30);
  kernels::set_launch_carveout(-1);
}

// Prefill graph buckets (model.h, prefill_token_buckets): ascending, the
// last one the step limit, and no bucket more than 1.5x the one before, so a
// prompt pads to at most 1.5x its rows (above 16).
TEST(ModelCpu, PrefillTokenBucketsCoverTheLimitWithBoundedPadding) {
  EXPECT_EQ(prefill_token_buckets(512), (std::vector<int>{16, 32, 64, 128, 192, 256, 384, 512}));
  EXPECT_EQ(prefill_token_buckets(2048),
            (std::vector<int>{16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048}));
  EXPECT_EQ(prefill_token_buckets(100), (std::vector<int>{16, 32, 64, 100}));
  EXPECT_EQ(prefill_token_buckets(16), (std::vector<int>{16}));
  EXPECT_EQ(prefill_token_buckets(8), (std::vector<int>{8}));
  for (int max : {17, 129, 200, 1000, 4096, 8192, 65536}) {
    const std::vector<int> b = prefill_token_buckets(max);
    ASSERT_EQ(b.back(), max);
    for (size_t i = 1; i < b.size(); ++i) {
      EXPECT_GT(b[i], b[i - 1]) << max;
      if (b[i - 1] >= 128) {
        EXPECT_LE(2 * b[i], 3 * b[i - 1]) << max << " bucket " << b[i];
      }
    }
  }
}

// Padding a step's metadata to a graph's shape (model_meta.h, MetaPad): pad
// rows go to the scratch slot at position 0, pad logit rows are greedy rows
// of their own index, pad fresh sequences are empty at the real row count;
// real entries are untouched.
TEST(ModelCpu, StepMetaPadsRowsLogitRowsAndFreshSequences) {
  StepInput in;
  in.tokens = {5, 6, 7, 8, 9};
  in.positions = {0, 1, 2, 0, 1};
  in.slots = {3, 3, 3, 1, 1};
  in.fresh_starts = {0, 3, 5};
  in.max_fresh_len = 3;
  in.logit_rows = {2, 4};
  in.temperature = {0.5f, 0.0f};
  in.top_p = {0.9f, 1.0f};
  in.top_k = {7, 0};
  in.gen_index = {0, 0};
  in.seeds = {11, 12};
  const MetaLayout m(16, 4, 8);
  std::vector<char> host(m.bytes, 0x7f);
  fill_step_meta(m, host.data(), in, MetaPad{16, 4, 4}, /*pad_slot=*/9);
  auto i32 = [&](size_t off, int i) { return reinterpret_cast<const int32_t*>(host.data() + off)[i]; };
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(i32(m.ids, i), in.tokens[i]);
    EXPECT_EQ(i32(m.slots, i), in.slots[i]);
    EXPECT_EQ(i32(m.ctx_lens, i), in.positions[i] + 1);
  }
  for (int i = 5; i < 16; ++i) {
    EXPECT_EQ(i32(m.ids, i), 0);
    EXPECT_EQ(i32(m.positions, i), 0);
    EXPECT_EQ(i32(m.slots, i), 9);
    EXPECT_EQ(i32(m.ctx_lens, i), 1);
  }
  EXPECT_EQ(i32(m.logit_rows, 0), 2);
  EXPECT_EQ(i32(m.logit_rows, 1), 4);
  EXPECT_EQ(i32(m.top_k, 0), 7);
  for (int j = 2; j < 4; ++j) {
    EXPECT_EQ(i32(m.logit_rows, j), j);
    EXPECT_EQ(reinterpret_cast<const float*>(host.data() + m.temperature)[j], 0.0f);
  }
  // The pruned last layer's attention_head: each logit row's slot and context
  // length (rows 2 and 4: slot 3 at position 2, slot 1 at position 1); a pad
  // logit row's are the pad slot and 1.
  EXPECT_EQ(i32(m.head_slots, 0), 3);
  EXPECT_EQ(i32(m.head_ctx_lens, 0), 3);
  EXPECT_EQ(i32(m.head_slots, 1), 1);
  EXPECT_EQ(i32(m.head_ctx_lens, 1), 2);
  for (int j = 2; j < 4; ++j) {
    EXPECT_EQ(i32(m.head_slots, j), 9);
    EXPECT_EQ(i32(m.head_ctx_lens, j), 1);
  }
  // The sections lie inside the block the step uploads after the sampling
  // parameters (Model::upload_meta copies [temperature, updates)).
  EXPECT_GE(m.head_slots, m.temperature);
  EXPECT_LE(m.head_ctx_lens + 4 * 4, m.updates);
  const std::vector<int32_t> starts{0, 3, 5, 5, 5};
  for (int k = 0; k < 5; ++k) EXPECT_EQ(i32(m.fresh_starts, k), starts[k]) << k;
  // No padding: nothing past the step's own entries is written.
  std::vector<char> plain(m.bytes, 0x7f);
  fill_step_meta(m, plain.data(), in, MetaPad{5, 2, 2}, 9);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(plain.data() + m.ids)[5], 0x7f7f7f7f);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(plain.data() + m.logit_rows)[2], 0x7f7f7f7f);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(plain.data() + m.fresh_starts)[3], 0x7f7f7f7f);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(plain.data() + m.head_slots)[2], 0x7f7f7f7f);
}

}  // namespace
}  // namespace lantern
