// attention_decode: every CUDA variant against the CPU reference (two-pass
// softmax over the block table, double accumulation). Tolerance: fp32 softmax
// here, one bf16 rounding of the output: atol 2e-3, rtol 1e-2, rel-L2 <= 1e-2.
// Block size 16, blocks a random permutation of a pool larger than needed
// (random contents everywhere, unused table entries -1), slots permuted.
// Shapes: the 1B model (32/8 heads, head_dim 64) at batch 1 and 8 with contexts
// 1, 15, 16, 17, 33, 100, 512 and 4096 (max context); batch 64; head_dim 128
// with group 1 and out aliasing q; head_dim 32 with group 8; group 3; head_dim
// 96 (split_k falls back to the seed; split_k_pipe to split_k_wave for head_dim
// 32 and 96); PipeTilesHeadDimsAndGroups adds shapes for split_k_pipe. Each
// non-aliased case runs twice and must give identical bits (the fused
// combine's arrival counters must reset).
#include <algorithm>
#include <numeric>
#include <random>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct DecodeCase {
  std::vector<int> ctx;
  int n_q, n_kv, hd;
  bool alias;
  int max_context;
  int block_size = 16;  // tokens per cache block; the pipe kernels shift for powers of two, divide otherwise
};

void check_decode(const DecodeCase& c) {
  const int b = int(c.ctx.size()), block_size = c.block_size;
  const int max_blocks = (c.max_context + block_size - 1) / block_size;
  const int max_seqs = b + 2;
  int needed = 0;
  for (int len : c.ctx) needed += (len + block_size - 1) / block_size;
  const int num_blocks = needed + 5;
  std::vector<int32_t> block_ids(num_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng());
  std::vector<int32_t> slots(max_seqs);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng());
  slots.resize(b);
  std::vector<int32_t> tables(size_t(max_seqs) * max_blocks, -1);
  int next = 0;
  for (int i = 0; i < b; ++i)
    for (int blk = 0; blk < (c.ctx[i] + block_size - 1) / block_size; ++blk)
      tables[size_t(slots[i]) * max_blocks + blk] = block_ids[next++];
  const size_t pool_elems = size_t(num_blocks) * 2 * block_size * c.n_kv * c.hd;
  const Bf16Data pool = random_bf16(pool_elems);
  const int q_stride = c.n_q * c.hd;
  const Bf16Data q = random_bf16(size_t(b) * q_stride, -2.f, 2.f);
  const float scale = 1.0f / std::sqrt(float(c.hd));
  std::vector<int32_t> ctx_lens(c.ctx.begin(), c.ctx.end());
  std::vector<float> ref(size_t(b) * q_stride);
  launch(cpu_reference(Family::attention_decode),
         AttentionDecodeArgs{q.values.data(), ref.data(), slots.data(), ctx_lens.data(),
                             KvCacheRef{const_cast<float*>(pool.values.data()), tables.data(),
                                        block_size, max_blocks, c.n_kv, c.hd},
                             b, c.max_context, c.n_q, q_stride, scale},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_pool(pool.bits);
  DeviceBuffer<int32_t> d_slots(slots), d_ctx(ctx_lens), d_tables(tables);
  WorkspaceShape shape;
  shape.max_batch_tokens = shape.max_seqs = max_seqs;
  shape.max_context = c.max_context;
  shape.n_q_heads = c.n_q, shape.n_kv_heads = c.n_kv, shape.head_dim = c.hd;
  GpuEnv env;
  std::vector<bf16_bits> ring;  // variant 12's output: variant 13 (its swizzled ring) must equal it bit for bit
  std::vector<bf16_bits> ring_t;  // variant 14's: variants 15 (runs of kv heads), 16 (TMA ring) and 18 must equal it
  for (const KernelEntry* e : cuda_variants(Family::attention_decode)) {
    SCOPED_TRACE(variant_label(*e) + " b=" + std::to_string(b) + " heads=" + std::to_string(c.n_q) +
                 "/" + std::to_string(c.n_kv) + " hd=" + std::to_string(c.hd) +
                 " max_context=" + std::to_string(c.max_context) + (c.alias ? " out=q" : ""));
    DeviceBuffer<bf16_bits> d_q(q.bits), d_out(c.alias ? 0 : size_t(b) * q_stride);
    d_out.poison();
    bf16_bits* out = c.alias ? d_q.get() : d_out.get();
    // Distinct slots: one row per sequence, so variant 9 runs its early-load kernels.
    AttentionDecodeArgs args{d_q.get(), out, d_slots.get(), d_ctx.get(),
                             KvCacheRef{d_pool.get(), d_tables.get(), block_size, max_blocks, c.n_kv, c.hd},
                             b, c.max_context, c.n_q, q_stride, scale};
    args.one_row_per_seq = true;
    launch(*e, args, env.ctx(*e, shape));
    env.sync();
    const std::vector<bf16_bits> first = c.alias ? d_q.download() : d_out.download();
    EXPECT_TRUE(matches(bf16_to_floats(first), ref, 2e-3, 1e-2, 1e-2));
    if (e->variant == 12) ring = first;
    if (e->variant == 13) EXPECT_EQ(first, ring) << "batched_ring6 differs from batched_ring";
    if (e->variant == 14) ring_t = first;
    if (e->variant == 15) EXPECT_EQ(first, ring_t) << "batched_heads_t differs from batched_ring6_t";
    if (e->variant == 16) EXPECT_EQ(first, ring_t) << "batched_tma_t differs from batched_ring6_t";
    if (e->variant == 18) EXPECT_EQ(first, ring_t) << "persistent_tma_t differs from batched_ring6_t";
    if (!c.alias) {  // a second launch must give the same bits (no state left behind)
      d_out.poison();
      args.out = d_out.get();
      launch(*e, args, env.ctx(*e, shape));
      env.sync();
      EXPECT_EQ(d_out.download(), first) << "second launch differs";
    }
  }
}

TEST(AttentionDecodeGpu, ModelShapes) {
  LANTERN_REQUIRE_GPU();
  check_decode({{512}, 32, 8, 64, false, 4096});
  check_decode({{1, 15, 16, 17, 33, 100, 512, 4096}, 32, 8, 64, false, 4096});
  check_decode({{4096, 4095}, 32, 8, 64, true, 4096});
  check_decode({std::vector<int>(64, 200), 32, 8, 64, false, 512});
}

TEST(AttentionDecodeGpu, EdgeHeadDimsAndGroups) {
  LANTERN_REQUIRE_GPU();
  check_decode({{1, 300}, 8, 8, 128, true, 1024});
  check_decode({{17, 64}, 32, 4, 32, false, 256});
  check_decode({{50, 129}, 24, 8, 64, false, 256});
  check_decode({{70, 16}, 8, 4, 96, true, 128});
}

// Shapes aimed at variant 6 (split_k_pipe), which the cases above also run:
// one 32 k context (many 64-key tiles per split, ~49 splits), head_dim 128
// through the tensor-core path with contexts around the 64-key tile and the
// 16-key block, a group of 16 (every mma row a head) with out aliasing q, and
// group 1 with a max_context far above the context (device-sized splits).
TEST(AttentionDecodeGpu, PipeTilesHeadDimsAndGroups) {
  LANTERN_REQUIRE_GPU();
  check_decode({{32768}, 32, 8, 64, false, 32768});
  check_decode({{63, 64, 65, 127, 1000, 2049}, 32, 8, 128, false, 4096});
  check_decode({{300, 5}, 16, 1, 64, true, 512});
  check_decode({{700, 1}, 8, 8, 64, false, 8192});
}

// Shapes aimed at variant 12 (batched_ring) from 48 rows: random contexts
// around its 64-key tiles and 2-tile ring (1 .. 600 keys) at batch 64;
// head_dim 128 at batch 48; one 9000-key context among short ones with
// max_context 12000 (750 table entries: two splits, the last block combines)
// and out aliasing q; 256 sequences (variant 13's three waves). Variant 13
// must equal variant 12 bit for bit everywhere (same arithmetic, another
// shared-memory layout).
std::vector<int> random_contexts(int n, int lo, int hi) {
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<int> ctx(n);
  for (int& c : ctx) c = len(rng());
  return ctx;
}

TEST(AttentionDecodeGpu, BatchedRingShapes) {
  LANTERN_REQUIRE_GPU();
  std::vector<int> mixed = random_contexts(54, 1, 600);
  for (int c : {1, 16, 17, 64, 65, 127, 128, 129, 192, 193}) mixed.push_back(c);
  check_decode({mixed, 32, 8, 64, false, 1024});
  check_decode({random_contexts(48, 1, 300), 32, 8, 128, false, 512});
  std::vector<int> one_long = random_contexts(49, 1, 200);
  one_long.push_back(9000);
  check_decode({one_long, 32, 8, 64, true, 12000});
  // 256 sequences: variant 13's 6 blocks per SM (2048 blocks in 3 waves).
  check_decode({random_contexts(256, 100, 300), 32, 8, 64, false, 1024});
  // 24 and 32 sequences: variant 14's own kernel from 24 rows (12 / 13 run variant 11 there).
  check_decode({random_contexts(24, 1, 300), 32, 8, 64, false, 512});
  check_decode({random_contexts(32, 1, 300), 32, 8, 64, true, 512});
  // 128 and 160 sequences: variant 15's runs of 2 and 4 kv heads (256 above: runs of 4).
  check_decode({random_contexts(128, 1, 400), 32, 8, 64, false, 1024});
  check_decode({random_contexts(160, 1, 300), 32, 8, 64, true, 512});
  // Cache blocks of 12 tokens (not a power of two: the division path) and of 32.
  check_decode({random_contexts(64, 1, 400), 32, 8, 64, false, 1024, 12});
  check_decode({random_contexts(64, 1, 400), 32, 8, 64, false, 1024, 32});
  check_decode({{1, 50, 3000}, 32, 8, 64, false, 4096, 12});
  // Variant 18's persistent grid (from 24 rows, more items than variant 14's one wave: 128, 160
  // and 256 sequences above) with cache blocks of 32 and contexts of 1 to 4 tiles.
  check_decode({random_contexts(200, 1, 260), 32, 8, 64, false, 512, 32});
}

}  // namespace
}  // namespace lantern::test
