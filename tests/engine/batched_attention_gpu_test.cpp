// attention_decode.12 (batched_ring) inside the engine: its kernel loads the
// step metadata, block-table entries and every K/V row but the newest BEFORE
// the PDL dependency wait. In graph-replayed decode steps of >= 48 sequences
// (the only place it runs its own kernel), behind the rope_kv_write that
// writes the newest row, it must give what variant 10 gives (every load after
// the wait; the same tile arithmetic, but variant 10 may split a context and
// merge the splits, so the comparison is a tolerance, not bits). A stale or
// missing row changes a logit row by O(1); the merge order by ~1e-3.
// The model: a synthetic 2-layer Llama with head_dim 64 (the tiny preset's 32
// is not served by the pipe kernels), 64 teacher-forced requests with prompts
// of 1-190 tokens and 40 forced tokens each (contexts cross KV blocks of 16
// and tiles of 64 keys; the decode steps after the prefill run all 64 rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/synth.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

// A two-layer synthetic Llama with head_dim 64 (the tiny preset's 32 is not
// served by the pipe kernels); each model below is written once per process.
std::filesystem::path write_hd64_model(const char* name, int hidden, int n_q_heads, int n_kv_heads,
                                       int intermediate = 1024) {
  ModelConfig cfg = synth_preset("tiny");
  cfg.hidden_size = hidden;
  cfg.intermediate_size = intermediate;
  cfg.num_q_heads = n_q_heads;
  cfg.num_kv_heads = n_kv_heads;
  cfg.head_dim = 64;
  const std::filesystem::path d = test::scratch_dir(name);
  SynthOptions o;
  o.seed = test::test_seed();
  o.with_tokenizer = false;
  write_synthetic_model(cfg, d, o);
  return d;
}

const std::filesystem::path& hd64_model() {
  static const std::filesystem::path dir = write_hd64_model("batched-attention-hd64", 512, 8, 2);
  return dir;
}

// The 1B model's attention shape (32 q / 8 kv heads of 64): enough kv heads
// for attention_decode.15's runs of adjacent heads.
const std::filesystem::path& kv8_model() {
  static const std::filesystem::path dir = write_hd64_model("batched-attention-kv8", 2048, 32, 8);
  return dir;
}

// An MLP as deep as the 1B model's down_proj is long (intermediate 4096: k >=
// 4096, where proj_residual_norm.6 runs its wide form).
const std::filesystem::path& wide_down_model() {
  static const std::filesystem::path dir = write_hd64_model("batched-attention-wide-down", 512, 8, 2, 4096);
  return dir;
}

// The first kSlice logits of every decoded position, keyed by (request, position).
constexpr int kSlice = 2048;
using Rows = std::map<std::pair<int64_t, int>, std::vector<float>>;

using Work = std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>;

Rows run(const std::map<std::string, std::string>& kernels, const Work& work,
         const std::filesystem::path& model = hd64_model(), int max_seqs = 64) {
  ModelConfig cfg = ModelConfig::load(model);
  EngineOptions opt;
  opt.backend = kernels::Backend::cuda;
  opt.limits.max_seqs = max_seqs;
  opt.limits.max_batch_tokens = 2048;  // the prompts prefill in 3-4 steps
  opt.limits.kv_num_blocks = 4096;
  for (const auto& [family, variant] : kernels) opt.kernels.emplace_back(family, variant);
  Engine e(cfg, Weights::load(cfg, model, opt.backend), opt);
  const nlohmann::json d = e.describe();
  for (const auto& [family, variant] : kernels) {  // by name or number: the engine runs what was asked
    const nlohmann::json& k = d["kernels"][family];
    EXPECT_TRUE(k["name"] == variant || std::to_string(k["variant"].get<int>()) == variant) << k.dump();
  }
  Rows rows;
  for (size_t i = 0; i < work.size(); ++i) {
    Request r;
    r.prompt = work[i].first;
    r.forced_tokens = work[i].second;
    r.max_new_tokens = static_cast<int>(r.forced_tokens.size());
    r.stop_at_eos = false;
    const int64_t tag = static_cast<int64_t>(i);
    r.on_logits = [&rows, tag](int64_t, int pos, const float* row) { rows[{tag, pos}].assign(row, row + kSlice); };
    e.submit(r);
  }
  e.run_until_idle();
  EXPECT_EQ(e.take_finished().size(), work.size());
  return rows;
}

// Per position of `ref`, the rel-L2 of `got`'s row: the worst, and how many
// positions exceed `bound` (a position missing from `got` counts as one).
struct RowDiff {
  double worst = 0;
  size_t far = 0;
};
RowDiff compare_rows(const Rows& got, const Rows& ref, double bound) {
  RowDiff d;
  for (const auto& [key, row] : ref) {
    auto it = got.find(key);
    const double rel = it == got.end() ? 1.0 : test::rel_l2(it->second, row);
    d.worst = std::max(d.worst, rel);
    d.far += rel > bound;
  }
  return d;
}

TEST(BatchedAttentionGpu, EarlyLoadsInGraphsMatchTheWaitFirstPipe) {
  LANTERN_REQUIRE_GPU();
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> work;
  for (int i = 0; i < 64; ++i) work.emplace_back(test::random_token_ids(1 + 3 * i), test::random_token_ids(40));
  const Rows a = run({{"attention_decode", "12"}}, work), b = run({{"attention_decode", "10"}}, work);
  // Variant 13 is variant 12 with another shared-memory layout: the same logits, bit for bit.
  EXPECT_TRUE(run({{"attention_decode", "13"}}, work) == a) << "batched_ring6 changed a logit";
  // Variant 14 (the transposed warp tile) accumulates in another order: close to variant 12, not equal.
  const Rows rows_t = run({{"attention_decode", "14"}}, work);
  const RowDiff t = compare_rows(rows_t, a, 2e-2);
  std::printf("[batched-attention-gpu] batched_ring6_t vs batched_ring: worst logit rel-L2 %.2e over %zu positions\n",
              t.worst, a.size());
  EXPECT_EQ(t.far, 0u) << "batched_ring6_t vs batched_ring: worst rel-L2 " << t.worst;
  // Variant 15 runs variant 14's warp tiles and merge per head: the same logits, bit for bit.
  EXPECT_TRUE(run({{"attention_decode", "15"}}, work) == rows_t) << "batched_heads_t changed a logit";
  // Variant 16 fills variant 14's ring with the TMA: the same tiles in the same order, bit for bit.
  EXPECT_TRUE(run({{"attention_decode", "16"}}, work) == rows_t) << "batched_tma_t changed a logit";
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 64u * 40u);
  size_t far = 0;
  double worst = 0;
  for (const auto& [key, row] : b) {
    auto it = a.find(key);
    ASSERT_NE(it, a.end());
    double num = 0, den = 0;
    for (int v = 0; v < kSlice; ++v) {
      num += (double(it->second[v]) - row[v]) * (double(it->second[v]) - row[v]);
      den += double(row[v]) * row[v];
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    worst = std::max(worst, rel);
    far += rel > 2e-2;
  }
  EXPECT_EQ(far, 0u) << "of " << b.size() << " positions differ by more than 2e-2 rel-L2 (worst " << worst << ")";
  std::printf("[batched-attention-gpu] attention_decode 12 vs 10, 64 sequences in graphs: worst rel-L2 %.2e over %zu positions\n",
              worst, b.size());
}

// Variant 14 runs its own kernel from 24 rows (variants 12 / 13 from 48): 32
// teacher-forced sequences in graph-replayed decode (the 32-row bucket) against
// variant 10's wait-first register kernel. A stale newest row or a wrong tile
// would change a logit row by O(1).
TEST(BatchedAttentionGpu, TransposedTileFrom24RowsMatchesTheRegisterKernel) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 32; ++i) work.emplace_back(test::random_token_ids(1 + 5 * i), test::random_token_ids(32));
  const Rows ref = run({{"attention_decode", "10"}}, work);
  ASSERT_EQ(ref.size(), 32u * 32u);
  const RowDiff d = compare_rows(run({{"attention_decode", "14"}}, work), ref, 2e-2);
  std::printf("[batched-attention-gpu] batched_ring6_t vs split_k_auto48, 32 sequences in graphs: worst rel-L2 %.2e\n",
              d.worst);
  EXPECT_EQ(d.far, 0u) << "positions differ by more than 2e-2 rel-L2 (worst " << d.worst << ")";
}

// attention_decode.15 streams runs of adjacent kv heads through one block:
// 160 teacher-forced sequences of a model with 8 kv heads make runs of 4 heads
// (160 x 8 / 4 = 320 blocks, one wave) in graph-replayed decode. Per head it
// runs variant 14's warp tiles and merge in the same order, so every logit
// must equal variant 14's bit for bit: a head's q, tile or merge buffer taken
// from its neighbour in the run would change a row by O(1). Variants 16 and 18
// run variant 14's tiles and merge in the same order too (18: a block's items
// one after another through one ring -- an item's tile or state taken from the
// item before it would show the same way).
TEST(BatchedAttentionGpu, HeadRunsInGraphsEqualTheTransposedTile) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 160; ++i) work.emplace_back(test::random_token_ids(1 + i), test::random_token_ids(24));
  const Rows ref = run({{"attention_decode", "14"}}, work, kv8_model(), 160);
  ASSERT_EQ(ref.size(), 160u * 24u);
  // Variants 15 (runs of kv heads), 16 (the TMA-filled ring) and 18 (the persistent TMA ring, its
  // items streaming through one ring) at the 1B model's attention shape.
  for (const char* variant : {"15", "16", "18"}) {
    const Rows got = run({{"attention_decode", variant}}, work, kv8_model(), 160);
    const RowDiff d = compare_rows(got, ref, 0.0);
    std::printf("[batched-attention-gpu] attention_decode.%s vs batched_ring6_t, 160 sequences x 8 kv heads in "
                "graphs: %zu of %zu positions differ (worst rel-L2 %.2e)\n",
                variant, d.far, ref.size(), d.worst);
    EXPECT_TRUE(got == ref) << "attention_decode." << variant << ": " << d.far << " positions differ (worst rel-L2 "
                            << d.worst << ")";
  }
}

// attention_decode.17 splits each context over a one-wave grid below 24 rows
// (33 splits per kv head at batch 1 on the H200, fewer with more rows), the
// splits' K/V through a TMA-filled ring, the last block combining them
// (variant 20 the same, but a context of up to 256 keys -- here the 1-, 63-
// and 129-token prompts' 20 steps -- as one split without the combine). In
// graph-replayed decode, first one sequence alone (every split of a 2000-token
// context, the newest row in the last), then 6 together with contexts from 1
// to ~2900 tokens, against variant 14 (which runs variant 11's register
// kernel at these batches: another split and merge order, so a tolerance). A
// stale newest row, a split's keys read twice or skipped, or a wrong combine
// changes a logit row by O(1).
TEST(BatchedAttentionGpu, SplitTmaRingBelow24RowsMatchesTheRegisterKernel) {
  LANTERN_REQUIRE_GPU();
  const std::vector<Work> cases = {
      {{test::random_token_ids(2000), test::random_token_ids(20)}},
      {{test::random_token_ids(1), test::random_token_ids(20)},
       {test::random_token_ids(63), test::random_token_ids(20)},
       {test::random_token_ids(700), test::random_token_ids(20)},
       {test::random_token_ids(1500), test::random_token_ids(20)},
       {test::random_token_ids(2900), test::random_token_ids(20)},
       {test::random_token_ids(129), test::random_token_ids(20)}}};
  for (const Work& work : cases) {
    const Rows ref = run({{"attention_decode", "14"}}, work, kv8_model(), 8);
    ASSERT_EQ(ref.size(), work.size() * 20u);
    for (const char* variant : {"17", "20"}) {  // 20: contexts of <= 256 keys as one split
      const RowDiff d = compare_rows(run({{"attention_decode", variant}}, work, kv8_model(), 8), ref, 2e-2);
      std::printf("[batched-attention-gpu] attention_decode.%s vs batched_ring6_t, %zu sequences in graphs: worst "
                  "rel-L2 %.2e\n",
                  variant, work.size(), d.worst);
      EXPECT_EQ(d.far, 0u) << variant << ", " << work.size() << " sequences: positions differ by more than 2e-2 "
                           << "rel-L2 (worst " << d.worst << ")";
    }
  }
}

// gemm.7's batch kernel in the engine (tested only; session 11): with its
// fused-family forms (gate_up_swiglu.3, proj_residual_norm.3), 64 teacher-forced
// sequences decoding together run every projection and the LM head through it
// at m = 64, in graph-replayed, PDL-chained steps (qkv -> rope_kv_write, o ->
// add_rmsnorm, gate_up -> down -> add_rmsnorm). Against cublasGemmEx + the
// unfused families: a kernel reading its input before the previous kernel wrote
// it, or a wrong tile, changes a logit row by O(1); summation order by ~1e-3.
TEST(BatchGemmGpu, MidStreamInGraphsMatchesCublas) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 64; ++i) work.emplace_back(test::random_token_ids(1 + 2 * i), test::random_token_ids(24));
  const Rows a = run({{"gemm", "mid_stream"}, {"gate_up_swiglu", "mid_fused"}, {"proj_residual_norm", "mid_unfused"}},
                     work);
  const Rows b = run({{"gemm", "seed"}, {"gate_up_swiglu", "unfused"}, {"proj_residual_norm", "unfused"}}, work);
  ASSERT_EQ(a.size(), 64u * 24u);
  ASSERT_EQ(b.size(), a.size());
  const RowDiff d = compare_rows(a, b, 2e-2);
  EXPECT_EQ(d.far, 0u) << "of " << b.size() << " positions differ by more than 2e-2 rel-L2 (worst " << d.worst << ")";
  std::printf("[batch-gemm-gpu] gemm.7 mid_stream vs gemm.1, 64 sequences in graphs: worst rel-L2 %.2e over %zu positions\n",
              d.worst, b.size());
}

// gemm.8's wgmma kernel in the engine (session 20; gate_up_swiglu.4, its
// SwiGLU form, is the default since session 21), as gemm.7's
// test above: 64 teacher-forced sequences decoding together run qkv, o,
// gate_up (with the SwiGLU store) and down through it at m = 64 in
// graph-replayed, PDL-chained steps (the LM head's fp32 logits stay on
// cuBLASLt), against cublasGemmEx + the unfused families.
TEST(BatchGemmGpu, WgmmaInGraphsMatchesCublas) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 64; ++i) work.emplace_back(test::random_token_ids(1 + 2 * i), test::random_token_ids(24));
  const Rows a =
      run({{"gemm", "wgmma_split"}, {"gate_up_swiglu", "wg_fused"}, {"proj_residual_norm", "wg_unfused"}}, work);
  const Rows b = run({{"gemm", "seed"}, {"gate_up_swiglu", "unfused"}, {"proj_residual_norm", "unfused"}}, work);
  ASSERT_EQ(a.size(), 64u * 24u);
  ASSERT_EQ(b.size(), a.size());
  const RowDiff d = compare_rows(a, b, 2e-2);
  EXPECT_EQ(d.far, 0u) << "of " << b.size() << " positions differ by more than 2e-2 rel-L2 (worst " << d.worst << ")";
  std::printf("[batch-gemm-gpu] gemm.8 wgmma_split vs gemm.1, 64 sequences in graphs: worst rel-L2 %.2e over %zu "
              "positions\n",
              d.worst, b.size());
}

// gate_up_swiglu.5's wide form in the engine (session 24, the default): 200
// teacher-forced sequences decoding together run the gate/up GEMM with the
// SwiGLU store at 129..256 rows (256 batch columns per block; at this
// model's inter 1024, 16 weight tiles, so k splits over a cluster too) in
// graph-replayed, PDL-chained steps, and the prefill chunks of up to 256
// rows; against cublasGemmEx + swiglu (the unfused families).
TEST(BatchGemmGpu, WideGateUpInGraphsMatchesCublas) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 200; ++i) work.emplace_back(test::random_token_ids(1 + i % 97), test::random_token_ids(16));
  const Rows a = run({{"gate_up_swiglu", "wg_wide"}}, work, hd64_model(), 200);
  const Rows b = run({{"gemm", "seed"}, {"gate_up_swiglu", "unfused"}}, work, hd64_model(), 200);
  ASSERT_EQ(a.size(), 200u * 16u);
  ASSERT_EQ(b.size(), a.size());
  const RowDiff d = compare_rows(a, b, 2e-2);
  EXPECT_EQ(d.far, 0u) << "of " << b.size() << " positions differ by more than 2e-2 rel-L2 (worst " << d.worst << ")";
  std::printf("[batch-gemm-gpu] gate_up_swiglu.5 wg_wide vs gemm.1 + swiglu, 200 sequences in graphs: worst rel-L2 "
              "%.2e over %zu positions\n",
              d.worst, b.size());
}

// proj_residual_norm.6's wide down_proj in the engine (session 25): 200
// teacher-forced sequences decoding together run down_proj (k 4096) on gemm.8's
// wide form with a bf16 store at 129..200 rows, then add_rmsnorm.1, in
// graph-replayed, PDL-chained steps (and prefill chunks of 129..256 rows);
// against variant 1 (cuBLASLt, then add_rmsnorm.1). A wrong tile, a stale
// input or a lost split changes a logit row by O(1); summation order ~1e-3.
TEST(BatchGemmGpu, WideDownProjInGraphsMatchesCublas) {
  LANTERN_REQUIRE_GPU();
  Work work;
  for (int i = 0; i < 200; ++i) work.emplace_back(test::random_token_ids(1 + i % 97), test::random_token_ids(16));
  const Rows a = run({{"proj_residual_norm", "wg_wide_down"}}, work, wide_down_model(), 200);
  const Rows b = run({{"proj_residual_norm", "unfused"}}, work, wide_down_model(), 200);
  ASSERT_EQ(a.size(), 200u * 16u);
  ASSERT_EQ(b.size(), a.size());
  const RowDiff d = compare_rows(a, b, 2e-2);
  EXPECT_EQ(d.far, 0u) << "of " << b.size() << " positions differ by more than 2e-2 rel-L2 (worst " << d.worst << ")";
  EXPECT_GT(d.worst, 0.0) << "the wide form must have run (it sums k in another order than cuBLASLt)";
  std::printf("[batch-gemm-gpu] proj_residual_norm.6 wg_wide_down vs unfused, 200 sequences in graphs: worst rel-L2 "
              "%.2e over %zu positions\n",
              d.worst, b.size());
}

// The deferred-norm table in the engine (proj_residual_norm.4, gemv_add): the
// projections add into x in their GEMV epilogue and gate_up_swiglu / qkv_proj
// normalise x in their GEMV prologue, in graph-replayed, PDL-chained decode
// steps (m = 1, 5 and 16: the GEMV path; 24: cuBLASLt with the norm run ahead
// and residual.2) and in the prefill steps (m > 16). Against the default
// table (add_rmsnorm.1 writes xn): the two differ only where a 1/rms summed in
// another order tips a bf16 rounding of the normalised operand (~1e-3
// rel-L2 at most); a GEMM reading x before the epilogue added into it, a
// missing norm or the wrong layer's weight moves a logit row by O(1).
TEST(DeferredNormGpu, EngineInGraphsMatchesTheNormKernels) {
  LANTERN_REQUIRE_GPU();
  for (int seqs : {1, 5, 16, 24}) {
    SCOPED_TRACE(testing::Message() << seqs << " sequences");
    Work work;
    for (int i = 0; i < seqs; ++i) work.emplace_back(test::random_token_ids(1 + 7 * i), test::random_token_ids(20));
    const Rows a = run({{"proj_residual_norm", "gemv_add"}}, work), b = run({}, work);
    ASSERT_EQ(a.size(), size_t(seqs) * 20u);
    ASSERT_EQ(b.size(), a.size());
    const RowDiff d = compare_rows(a, b, 1e-2);
    EXPECT_EQ(d.far, 0u) << "of " << b.size() << " positions differ by more than 1e-2 rel-L2 (worst " << d.worst << ")";
    std::printf("[deferred-norm-gpu] proj_residual_norm.4 vs the default, %d sequences in graphs: worst rel-L2 %.2e over %zu positions\n",
                seqs, d.worst, b.size());
  }
}

}  // namespace
}  // namespace lantern
