// qkv_rope with the decode attention folded in (QkvRopeArgs::attention; the
// engine's qkv_attention op): qkv_rope.4 (gemv_rope_attn: the attention in
// the q/k/v GEMV's launch, kernels/cuda/qkv_attn_tail.cuh) on fresh random
// decode rows, checked four ways.
//  - q_out, qkv's k and v columns and the whole KV pool bit-identical to
//    qkv_rope.3 with the same attention (the composed form: the GEMV with the
//    rope epilogue, then the default attention_decode kernel): both run the
//    same rope epilogue; only the attention differs.
//  - attn_out against the CPU attention reference run on the GPU's own bf16 q
//    and cache (fp32 scores, double softmax and sums): per element one bf16
//    ulp of the reference (the output's rounding may flip on fp32 order and
//    expf differences of ~1e-6) plus 1e-4; rel-L2 4e-3.
//  - attn_out against the composed form's: rel-L2 1e-2 (that kernel's own
//    rounding differs).
//  - everything against the fp32 definition (CPU qkv_rope.0 with the
//    attention: gemm, rope_kv_write, attention_decode references, no bf16
//    rounding between them): rel-L2 2e-2.
// And two launches of variant 4 give the same bits. Shapes: Llama-3.2-1B's
// attention (32 q / 8 kv heads x 64, k 2048: 24 tiles per kv head group, no
// split) with contexts of 1 (the token itself), 16-17 (a block edge), 256
// (one whole chunk), 257 and 600 (the online softmax over 2 and 3 chunks),
// at m = 1, 3 and 8 (the tail runs the rows in turn); 2 kv heads of 2 q heads
// (k 4096: 2-block clusters, the tail in each cluster's rank 0); and head_dim
// 128 (the tail does not fit: variant 4 runs variant 3 and the attention
// kernel, the same bits as variant 3).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct Case {
  int n_q, n_kv, hd, k;
  std::vector<int> positions;  // one decode row per sequence
};

struct Outputs {
  std::vector<float> q, kv, pool, attn;
};

struct CaseSetup {
  Case c;
  int m, q_dim, kv_dim, cols, block_size = 16, max_blocks = 48, num_blocks;
  std::vector<int32_t> tables, slots, ctx_lens;
  Bf16Data a, w, pool;
  std::vector<float> inv_freq;
  float scale;

  explicit CaseSetup(const Case& cc) : c(cc), m(int(cc.positions.size())) {
    q_dim = c.n_q * c.hd, kv_dim = c.n_kv * c.hd, cols = q_dim + 2 * kv_dim;
    num_blocks = (m + 1) * max_blocks;
    random_paging(m, max_blocks, tables, slots);
    for (int p : c.positions) ctx_lens.push_back(p + 1);
    a = random_bf16(size_t(m) * c.k, -1.f, 1.f);
    w = random_bf16(size_t(cols) * c.k, -0.1f, 0.1f);
    pool = random_bf16(size_t(num_blocks) * 2 * block_size * kv_dim);
    inv_freq = plain_inv_freq(c.hd);
    scale = 1.0f / std::sqrt(float(c.hd));
  }
  int max_context() const { return max_blocks * block_size; }
  QkvAttention attention(void* out, const int32_t* lens) const {
    QkvAttention at;
    at.out = out;
    at.context_lens = lens;
    at.host_context_lens = ctx_lens.data();
    at.max_context = max_context();
    at.scale = scale;
    at.one_row_per_seq = true;
    return at;
  }
  WorkspaceShape shape() const {
    WorkspaceShape s;
    s.max_batch_tokens = s.max_seqs = m;
    s.max_context = max_context();
    s.n_q_heads = c.n_q, s.n_kv_heads = c.n_kv, s.head_dim = c.hd;
    return s;
  }
};


// The fp32 definition: CPU qkv_rope.0 with the attention folded in.
Outputs fp32_definition(const CaseSetup& s) {
  std::vector<float> qkv(size_t(s.m) * s.cols), q(size_t(s.m) * s.q_dim), attn(size_t(s.m) * s.q_dim);
  std::vector<float> p = s.pool.values;
  QkvRopeArgs args{s.a.values.data(), s.w.bits.data(), qkv.data(), q.data(), s.c.positions.data(), s.slots.data(),
                   s.inv_freq.data(), KvCacheRef{p.data(), s.tables.data(), s.block_size, s.max_blocks, s.c.n_kv, s.c.hd},
                   s.m, s.c.k, s.c.n_q};
  args.attention = s.attention(attn.data(), s.ctx_lens.data());
  launch(cpu_reference(Family::qkv_rope), args, cpu_ctx());
  return {q, kv_columns(qkv, s.m, s.q_dim, s.kv_dim), p, attn};
}

// A setup's inputs on the device and the folded launch's arguments over them.
struct DeviceRun {
  DeviceBuffer<bf16_bits> a, w, pool, qkv, q, attn;
  DeviceBuffer<int32_t> pos, slots, tables, lens;
  DeviceBuffer<float> freq;
  QkvRopeArgs args;

  explicit DeviceRun(const CaseSetup& s)
      : a(s.a.bits), w(s.w.bits), pool(s.pool.bits), qkv(size_t(s.m) * s.cols), q(size_t(s.m) * s.q_dim),
        attn(size_t(s.m) * s.q_dim), pos(s.c.positions), slots(s.slots), tables(s.tables), lens(s.ctx_lens),
        freq(s.inv_freq),
        args{a.get(), w.get(), qkv.get(), q.get(), pos.get(), slots.get(), freq.get(),
             KvCacheRef{pool.get(), tables.get(), s.block_size, s.max_blocks, s.c.n_kv, s.c.hd}, s.m, s.c.k, s.c.n_q} {
    qkv.poison();
    q.poison();
    attn.poison();
    args.attention = s.attention(attn.get(), lens.get());
  }
  DeviceRun(const DeviceRun&) = delete;
  DeviceRun& operator=(const DeviceRun&) = delete;

  Outputs download(const CaseSetup& s) const {
    return {bf16_to_floats(q.download()), kv_columns(bf16_to_floats(qkv.download()), s.m, s.q_dim, s.kv_dim),
            bf16_to_floats(pool.download()), bf16_to_floats(attn.download())};
  }
};

// `e`'s launch context on env, its workspace large enough for the composed
// attention too (the engine's is the largest entry's).
LaunchCtx variant_ctx(const CaseSetup& s, const KernelEntry& e, GpuEnv& env) {
  const KernelEntry& attention = Registry::global().best(Family::attention_decode, Backend::cuda);
  env.ctx(attention, s.shape());
  LaunchCtx ctx = env.ctx(e, s.shape());
  ctx.workspace = env.workspace.get();
  ctx.workspace_bytes = env.workspace.size();
  return ctx;
}

// One CUDA variant with the attention folded in.
Outputs run_variant(const CaseSetup& s, const KernelEntry& e, GpuEnv& env) {
  DeviceRun run(s);
  launch(e, run.args, variant_ctx(s, e, env));
  env.sync();
  return run.download(s);
}

// The CPU attention reference over a variant's own q_out and cache.
std::vector<float> attention_on(const CaseSetup& s, const Outputs& got) {
  std::vector<float> out(size_t(s.m) * s.q_dim), q = got.q, pool = got.pool;
  AttentionDecodeArgs d{q.data(), out.data(), s.slots.data(), s.ctx_lens.data(),
                        KvCacheRef{pool.data(), s.tables.data(), s.block_size, s.max_blocks, s.c.n_kv, s.c.hd},
                        s.m, s.max_context(), s.c.n_q, s.q_dim, s.scale};
  launch(cpu_reference(Family::attention_decode), d, cpu_ctx());
  return out;
}

int beyond_ulp(const std::vector<float>& got, const std::vector<float>& ref) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - ref[i]) <= bf16_ulp(ref[i]) + 1e-4) && bad++ < 3)
      std::printf("  attn element %zu: got %.6g, reference on the same inputs %.6g\n", i, got[i], ref[i]);
  return bad;
}

void check_case(const Case& c) {
  const CaseSetup s(c);
  std::string where = "heads " + std::to_string(c.n_q) + "/" + std::to_string(c.n_kv) + " hd=" +
                      std::to_string(c.hd) + " k=" + std::to_string(c.k) + " contexts";
  for (int len : s.ctx_lens) where += " " + std::to_string(len);
  SCOPED_TRACE(where);
  GpuEnv env;
  const KernelEntry& composed = Registry::global().find(Family::qkv_rope, "3");
  const KernelEntry& folded = Registry::global().find(Family::qkv_rope, "4");
  ASSERT_TRUE(folded.folds_attention) << "qkv_rope.4 carries the folds_attention trait";
  const Outputs base = run_variant(s, composed, env);
  const Outputs got = run_variant(s, folded, env);
  const Outputs again = run_variant(s, folded, env);
  const Outputs def = fp32_definition(s);
  EXPECT_TRUE(matches(got.q, base.q, 0, 0, 0)) << "q_out bit-identical to qkv_rope.3";
  EXPECT_TRUE(matches(got.kv, base.kv, 0, 0, 0)) << "k, v bit-identical to qkv_rope.3";
  EXPECT_TRUE(matches(got.pool, base.pool, 0, 0, 0)) << "pool bit-identical to qkv_rope.3";
  const std::vector<float> ref = attention_on(s, got);
  if (c.hd == 64) {  // the tail's attention
    EXPECT_EQ(beyond_ulp(got.attn, ref), 0) << "attn_out vs the CPU attention on the same bf16 inputs";
    EXPECT_LE(rel_l2(got.attn, ref), 4e-3) << "attn_out vs the CPU attention on the same bf16 inputs";
    EXPECT_LE(rel_l2(got.attn, base.attn), 1e-2) << "attn_out vs qkv_rope.3 + attention_decode";
  } else {  // the tail does not fit: variant 3's path and the same attention kernel
    EXPECT_TRUE(matches(got.attn, base.attn, 0, 0, 0)) << "attn_out bit-identical to qkv_rope.3's";
  }
  EXPECT_LE(rel_l2(got.attn, def.attn), 2e-2) << "attn_out vs the fp32 definition";
  EXPECT_LE(rel_l2(got.q, def.q), 5e-3) << "q_out vs the fp32 definition";
  EXPECT_TRUE(matches(again.attn, got.attn, 0, 0, 0)) << "two launches give the same bits";
  std::printf("[qkv_attention] %s: rel-L2 attn %.2e vs the CPU on the same inputs, %.2e vs qkv_rope.3 + "
              "attention_decode, %.2e vs the fp32 definition\n",
              where.c_str(), rel_l2(got.attn, ref), rel_l2(got.attn, base.attn), rel_l2(got.attn, def.attn));
}

TEST(QkvAttentionGpu, FoldedAttentionMatchesTheReferencesAndTheComposedForm) {
  LANTERN_REQUIRE_GPU();
  check_case({32, 8, 64, 2048, {300}});
  check_case({32, 8, 64, 2048, {15}});
  check_case({32, 8, 64, 2048, {0, 255, 599}});
  check_case({32, 8, 64, 2048, {16, 256, 3, 767, 100, 511, 40, 128}});
  check_case({4, 2, 64, 4096, {37, 700}});   // 2-block clusters: the tail in rank 0
  check_case({4, 2, 128, 1024, {20, 300}});  // head_dim 128: not the tail's; variant 3's path
}

// Two streams running the folded kernel at once (two engines in one process):
// the groups' arrival counters are per stream, so interleaved launches on both
// still elect each group's last block of their own launch. Relaunching
// rewrites the same K/V rows, so every launch's output is the solo run's.
TEST(QkvAttentionGpu, ConcurrentStreamsKeepTheirOwnGroupCounters) {
  LANTERN_REQUIRE_GPU();
  const KernelEntry& folded = Registry::global().find(Family::qkv_rope, "4");
  const CaseSetup setups[2] = {CaseSetup({32, 8, 64, 2048, {300, 17}}), CaseSetup({32, 8, 64, 2048, {129, 40, 511}})};
  Outputs solo[2];
  for (int i = 0; i < 2; ++i) {
    GpuEnv env;
    solo[i] = run_variant(setups[i], folded, env);
  }
  GpuEnv env[2];
  DeviceRun runs[2] = {DeviceRun(setups[0]), DeviceRun(setups[1])};
  const LaunchCtx ctx[2] = {variant_ctx(setups[0], folded, env[0]), variant_ctx(setups[1], folded, env[1])};
  for (int l = 0; l < 12; ++l)
    for (int i = 0; i < 2; ++i) launch(folded, runs[i].args, ctx[i]);  // no sync between: the streams overlap
  env[0].sync(), env[1].sync();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("stream " + std::to_string(i));
    const Outputs got = runs[i].download(setups[i]);
    EXPECT_TRUE(matches(got.attn, solo[i].attn, 0, 0, 0)) << "attn_out bit-identical to the solo run";
    EXPECT_TRUE(matches(got.pool, solo[i].pool, 0, 0, 0)) << "pool bit-identical to the solo run";
  }
}

}  // namespace
}  // namespace lantern::test
