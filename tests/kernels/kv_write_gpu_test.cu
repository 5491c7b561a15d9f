// kv_write: every CUDA variant against the CPU reference. A copy, so the whole
// pool must match exactly (blocks not written keep their random contents on
// both sides). Block size 16; a prefill of 37 tokens crosses two block
// boundaries, decode tokens sit at 15, 16 and the last position of the table;
// blocks are a random permutation, so a wrong block id shows. Both the 16-byte
// path (8 kv heads x 64) and the scalar path (3 x 36, odd stride).
#include <algorithm>
#include <numeric>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_kv_write(int n_kv, int hd, int kv_stride) {
  const int block_size = 16, max_seqs = 4, max_blocks = 16, num_blocks = max_seqs * max_blocks + 3;
  const size_t row = size_t(n_kv) * hd;
  const size_t pool_elems = size_t(num_blocks) * 2 * block_size * row;
  std::vector<int32_t> tables(max_seqs * max_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng());
  std::vector<int32_t> positions, slots;
  for (int p = 0; p < 37; ++p) positions.push_back(p), slots.push_back(1);
  for (auto [slot, pos] : {std::pair{0, 15}, {2, 16}, {3, max_blocks * block_size - 1}})
    positions.push_back(pos), slots.push_back(slot);
  const int n = int(positions.size());
  const Bf16Data k = random_bf16(size_t(n) * kv_stride), v = random_bf16(size_t(n) * kv_stride);
  const Bf16Data pool = random_bf16(pool_elems);
  std::vector<float> ref = pool.values;
  launch(cpu_reference(Family::kv_write),
         KvWriteArgs{k.values.data(), v.values.data(), positions.data(), slots.data(),
                     KvCacheRef{ref.data(), tables.data(), block_size, max_blocks, n_kv, hd}, n,
                     kv_stride},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_k(k.bits), d_v(v.bits);
  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots), d_tables(tables);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::kv_write)) {
    SCOPED_TRACE(variant_label(*e) + " kv heads=" + std::to_string(n_kv) + " hd=" + std::to_string(hd));
    DeviceBuffer<bf16_bits> d_pool(pool.bits);
    launch(*e,
           KvWriteArgs{d_k.get(), d_v.get(), d_pos.get(), d_slots.get(),
                       KvCacheRef{d_pool.get(), d_tables.get(), block_size, max_blocks, n_kv, hd}, n,
                       kv_stride},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_pool.download()), ref, 0, 0, 0));
  }
}

TEST(KvWriteGpu, SmallAcrossBlockBoundaries) {
  LANTERN_REQUIRE_GPU();
  check_kv_write(8, 64, 8 * 64);
  check_kv_write(8, 64, 3 * 8 * 64);  // k, v rows inside a fused qkv row
  check_kv_write(3, 36, 110);         // scalar path
}

}  // namespace
}  // namespace lantern::test
