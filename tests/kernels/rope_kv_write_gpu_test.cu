// rope_kv_write: every CUDA variant against the CPU reference, which IS the
// unfused definition (q copied out, rope reference, kv_write reference). Checked:
// q_out and the rotated k left in qkv (rope's tolerance: atol 1e-3, rtol 8e-3,
// rel-L2 4e-3), v untouched in qkv (exact), and the whole KV pool (blocks not
// written keep their random contents on both sides) against the pool the
// unfused CUDA defaults (rope.3 on strided q/k, then kv_write.2) produce from
// the same inputs: the same fp32 formulas and a bit copy, so EXACT. Tokens:
// a 37-token prompt across block boundaries, decodes at positions 15, 16 and
// the table's last, and one whose
// block-table entry is -1 (no cache write, still rotated). Shapes: Llama
// 3.2-1B heads (32 q / 8 kv x 64), head_dim 128 (4 / 2 heads), and head_dim 36
// (composed fallback).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;


void check_rope_kv_write(int n_q, int n_kv, int hd) {
  const int block_size = 16, max_seqs = 5, max_blocks = 8, num_blocks = max_seqs * max_blocks + 3;
  const int q_dim = n_q * hd, kv_dim = n_kv * hd, stride = q_dim + 2 * kv_dim;
  std::vector<int32_t> tables(max_seqs * max_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng());
  tables[4 * max_blocks + 0] = -1;  // slot 4 has no block: its token gets no cache write
  std::vector<int32_t> positions, slots;
  for (int p = 0; p < 37; ++p) positions.push_back(p), slots.push_back(1);
  for (auto [slot, pos] : {std::pair{0, 15}, {2, 16}, {3, max_blocks * block_size - 1}, {4, 3}})
    positions.push_back(pos), slots.push_back(slot);
  const int n = int(positions.size());
  const size_t pool_elems = size_t(num_blocks) * 2 * block_size * kv_dim;
  const Bf16Data qkv = random_bf16(size_t(n) * stride, -2.f, 2.f), pool = random_bf16(pool_elems);
  const std::vector<float> inv_freq = plain_inv_freq(hd);
  // CPU reference (tables with -1 make kv_write throw: the reference gets a
  // table where slot 4 points at a block, and its write there is undone).
  std::vector<int32_t> ref_tables = tables;
  ref_tables[4 * max_blocks] = num_blocks - 1;
  std::vector<float> ref_qkv = qkv.values, ref_q(size_t(n) * q_dim), ref_pool = pool.values;
  launch(cpu_reference(Family::rope_kv_write),
         RopeKvWriteArgs{ref_qkv.data(), ref_q.data(), positions.data(), slots.data(), inv_freq.data(),
                         KvCacheRef{ref_pool.data(), ref_tables.data(), block_size, max_blocks, n_kv, hd}, n,
                         n_q, stride},
         cpu_ctx());
  const size_t last_block = size_t(num_blocks - 1) * 2 * block_size * kv_dim;
  std::copy(pool.values.begin() + last_block, pool.values.end(), ref_pool.begin() + last_block);

  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots), d_tables(tables);
  DeviceBuffer<float> d_freq(inv_freq);
  GpuEnv env;
  // The unfused CUDA defaults on the same inputs.
  DeviceBuffer<bf16_bits> u_qkv(qkv.bits), u_pool(pool.bits);
  {
    const Registry& reg = Registry::global();
    const KernelEntry& rope = reg.best(Family::rope, Backend::cuda);
    const KernelEntry& kvw = reg.best(Family::kv_write, Backend::cuda);
    bf16_bits* k = u_qkv.get() + q_dim;
    launch(rope, RopeArgs{u_qkv.get(), k, d_pos.get(), d_freq.get(), n, n_q, n_kv, hd, stride, stride},
           env.ctx(rope, WorkspaceShape{}));
    launch(kvw,
           KvWriteArgs{k, k + kv_dim, d_pos.get(), d_slots.get(),
                       KvCacheRef{u_pool.get(), d_tables.get(), block_size, max_blocks, n_kv, hd}, n, stride},
           env.ctx(kvw, WorkspaceShape{}));
    env.sync();
  }
  const std::vector<float> unfused_pool = bf16_to_floats(u_pool.download());
  for (const KernelEntry* e : cuda_variants(Family::rope_kv_write)) {
    SCOPED_TRACE(variant_label(*e) + " heads " + std::to_string(n_q) + "/" + std::to_string(n_kv) +
                 " hd=" + std::to_string(hd));
    DeviceBuffer<bf16_bits> d_qkv(qkv.bits), d_pool(pool.bits), d_q(size_t(n) * q_dim);
    d_q.poison();
    launch(*e,
           RopeKvWriteArgs{d_qkv.get(), d_q.get(), d_pos.get(), d_slots.get(), d_freq.get(),
                           KvCacheRef{d_pool.get(), d_tables.get(), block_size, max_blocks, n_kv, hd}, n, n_q,
                           stride},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_q.download()), ref_q, 1e-3, 8e-3, 4e-3)) << "q_out";
    EXPECT_TRUE(matches(bf16_to_floats(d_qkv.download()), ref_qkv, 1e-3, 8e-3, 4e-3)) << "qkv (k rotated)";
    const std::vector<float> got_pool = bf16_to_floats(d_pool.download());
    EXPECT_TRUE(matches(got_pool, ref_pool, 1e-3, 8e-3, 4e-3)) << "pool vs the CPU reference";
    EXPECT_TRUE(matches(got_pool, unfused_pool, 0, 0, 0)) << "pool vs rope + kv_write on the GPU";
  }
}

TEST(RopeKvWriteGpu, MatchesReferenceAndTheUnfusedKernels) {
  LANTERN_REQUIRE_GPU();
  check_rope_kv_write(32, 8, 64);
  check_rope_kv_write(4, 2, 128);
  check_rope_kv_write(3, 1, 36);  // head_dim % 16 != 0: the composed path
}

}  // namespace
}  // namespace lantern::test
