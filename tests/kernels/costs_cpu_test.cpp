// The bytes and FLOPs the CPU entries report (kernels/costs.h with ActBytes = 4),
// checked against hand counts for small shapes.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/costs.h"
#include "kernels/registry.h"

namespace lantern::kernels {
namespace {

Cost cpu_cost(Family f, const void* args) {
  return Registry::global().find(f, "cpu_ref").cost(args);
}

TEST(CostsCpu, GemmIsTwoMnkAndEachOperandOnce) {
  GemmArgs g{nullptr, nullptr, nullptr, 3, 5, 7, false};
  Cost c = cpu_cost(Family::gemm, &g);
  EXPECT_EQ(c.flops, 2.0 * 3 * 5 * 7);
  EXPECT_EQ(c.bytes, 3 * 7 * 4 + 5 * 7 * 2 + 3 * 5 * 4);  // a float, w bf16, c float
  // The CUDA instantiation: bf16 activations, float logits when c_f32.
  EXPECT_EQ(gemm_cost<2>(g).bytes, 3 * 7 * 2 + 5 * 7 * 2 + 3 * 5 * 2);
  g.c_f32 = true;
  EXPECT_EQ(gemm_cost<2>(g).bytes, 3 * 7 * 2 + 5 * 7 * 2 + 3 * 5 * 4);
}

TEST(CostsCpu, AttentionCountsOnlyUnmaskedPairs) {
  // Sequences of 1 and 17 tokens: 1 + 17 * 18 / 2 = 154 causal pairs.
  const std::vector<int32_t> starts = {0, 1, 18};
  AttentionPrefillArgs p{};
  p.seq_starts = starts.data();
  p.host_seq_starts = starts.data();
  p.num_seqs = 2;
  p.max_seq_len = 17;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = 16;
  const Cost c = cpu_cost(Family::attention_prefill, &p);
  EXPECT_EQ(c.flops, 4.0 * 8 * 16 * 154);
  // q read + out written (18 x 8 x 16), k and v read (18 x 2 x 16), floats; 3 starts.
  EXPECT_EQ(c.bytes, (2.0 * 18 * 8 * 16 + 2.0 * 18 * 2 * 16) * 4 + 3 * 4);

  const std::vector<int32_t> lens = {1, 17, 40}, slots = {0, 1, 2};
  AttentionDecodeArgs d{};
  d.seq_slots = slots.data();
  d.context_lens = lens.data();
  d.cache.block_size = 16;
  d.cache.n_kv_heads = 2;
  d.cache.head_dim = 16;
  d.b = 3;
  d.max_context = 40;
  d.n_q_heads = 8;
  const Cost dc = cpu_cost(Family::attention_decode, &d);
  EXPECT_EQ(dc.flops, 4.0 * 8 * 16 * (1 + 17 + 40));
  // q + out; k and v of 58 cached tokens; 1 + 2 + 3 block-table entries; slots and lens.
  EXPECT_EQ(dc.bytes, 2.0 * 3 * 8 * 16 * 4 + 2.0 * 58 * 2 * 16 * 4 + 6 * 4 + 3 * 2 * 4);

  // CUDA (bf16): the device lengths are not readable; without a host copy every
  // sequence counts at max_context (3 x 40 tokens, 3 x 3 blocks) ...
  const Cost upper = attention_decode_cost<2>(d);
  EXPECT_EQ(upper.flops, 4.0 * 8 * 16 * 120);
  EXPECT_EQ(upper.bytes, 2.0 * 3 * 8 * 16 * 2 + 2.0 * 120 * 2 * 16 * 2 + 9 * 4 + 3 * 2 * 4);
  // ... with one, the real contexts (clamped to max_context as the kernels do).
  const std::vector<int32_t> host_lens = {1, 17, 90};
  d.context_lens = nullptr;  // a device pointer: never read
  d.host_context_lens = host_lens.data();
  const Cost real = attention_decode_cost<2>(d);
  EXPECT_EQ(real.flops, 4.0 * 8 * 16 * (1 + 17 + 40));
  EXPECT_EQ(real.bytes, 2.0 * 3 * 8 * 16 * 2 + 2.0 * 58 * 2 * 16 * 2 + 6 * 4 + 3 * 2 * 4);
}

TEST(CostsCpu, ElementwiseFamiliesReadAndWriteOnce) {
  SwigluArgs s{nullptr, nullptr, nullptr, 3, 10};
  EXPECT_EQ(cpu_cost(Family::swiglu, &s).bytes, 3 * 30 * 4);
  ResidualArgs r{nullptr, nullptr, 100};
  EXPECT_EQ(cpu_cost(Family::residual, &r).bytes, 300 * 4);
  EXPECT_EQ(cpu_cost(Family::residual, &r).flops, 100);
  const int32_t rows[2] = {0, 1};
  RmsnormArgs n{nullptr, nullptr, nullptr, rows, 2, 64, 1e-5f};
  EXPECT_EQ(cpu_cost(Family::rmsnorm, &n).bytes, 2 * 64 * 4 * 2 + 64 * 2 + 2 * 4);
  EmbeddingArgs e{nullptr, nullptr, nullptr, 4, 32, 1000};
  EXPECT_EQ(cpu_cost(Family::embedding, &e).bytes, 4 * 4 + 4 * 32 * 2 + 4 * 32 * 4);
  ArgmaxArgs a{nullptr, nullptr, 2, 1000};
  EXPECT_EQ(cpu_cost(Family::argmax, &a).bytes, 2 * 1000 * 4 + 2 * 4);
  KvWriteArgs kv{};
  kv.n = 5;
  kv.cache.n_kv_heads = 2;
  kv.cache.head_dim = 8;
  EXPECT_EQ(cpu_cost(Family::kv_write, &kv).bytes, 2.0 * 5 * 16 * 4 * 2 + 5 * 3 * 4);
}

// gate_up_swiglu: a, the [2 inter, k] weight and the [m, inter] output once
// each (the scratch intermediate is not counted); the GEMM's FLOPs + swiglu's.
TEST(CostsCpu, GateUpSwigluCountsTheFusedTraffic) {
  GateUpSwigluArgs g{nullptr, nullptr, nullptr, nullptr, 2, 10, 32};
  const Cost c = cpu_cost(Family::gate_up_swiglu, &g);
  EXPECT_EQ(c.bytes, 2.0 * 32 * 4 + 20.0 * 32 * 2 + 2.0 * 10 * 4);
  EXPECT_EQ(c.flops, 2.0 * 2 * 20 * 32 + 4.0 * 2 * 10);
}

// proj_residual_norm: a and the weight once, y written, then add_rmsnorm's
// traffic (x, y read; x, out written; the norm weight); GEMM + add_rmsnorm FLOPs.
TEST(CostsCpu, ProjResidualNormCountsTheProjectionAndTheNorm) {
  float out = 0;  // only its presence matters to the cost
  ProjResidualNormArgs p{nullptr, nullptr, nullptr, nullptr, nullptr, &out, 2, 10, 32, 1e-5f};
  const Cost c = cpu_cost(Family::proj_residual_norm, &p);
  EXPECT_EQ(c.bytes, 2.0 * 32 * 4 + 10.0 * 32 * 2 + 20.0 * 4 + 20.0 * 4 * 4 + 10.0 * 2);
  EXPECT_EQ(c.flops, 2.0 * 20 * 32 + 20.0 * 5 + 2);
  // The deferred norm (out == nullptr): a, the weight, x read and x written; one add per element.
  p.out = nullptr;
  const Cost d = cpu_cost(Family::proj_residual_norm, &p);
  EXPECT_EQ(d.bytes, 2.0 * 32 * 4 + 10.0 * 32 * 2 + 20.0 * 4 * 2);
  EXPECT_EQ(d.flops, 2.0 * 20 * 32 + 20.0);
}

// A GEMM's prologue norm adds its weight (k bf16) and rmsnorm's 3 FLOPs per
// element of a plus one per row.
TEST(CostsCpu, APrologueNormAddsItsWeightAndItsArithmetic) {
  GemmArgs g{nullptr, nullptr, nullptr, 3, 16, 64};
  const Cost plain = cpu_cost(Family::gemm, &g);
  uint16_t w = 0;
  g.norm = PrologueNorm{&w, nullptr, 1e-5f};
  const Cost normed = cpu_cost(Family::gemm, &g);
  EXPECT_EQ(normed.bytes - plain.bytes, 64.0 * 2);
  EXPECT_EQ(normed.flops - plain.flops, 3.0 * 3 * 64 + 3);
  GateUpSwigluArgs u{nullptr, nullptr, nullptr, nullptr, 3, 8, 64};
  const Cost u_plain = cpu_cost(Family::gate_up_swiglu, &u);
  u.norm = g.norm;
  EXPECT_EQ(cpu_cost(Family::gate_up_swiglu, &u).bytes - u_plain.bytes, 64.0 * 2);
}

}  // namespace
}  // namespace lantern::kernels
