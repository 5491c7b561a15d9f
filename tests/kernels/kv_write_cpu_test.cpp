// CPU reference: kv_write puts each row where the block table says, and nowhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& kv_write_ref() {
  return Registry::global().find(Family::kv_write, "cpu_ref");
}

constexpr float kPoison = -12345.5f;

TEST(KvWriteCpu, WritesRowsWhereTheBlockTableSaysAndNothingElse) {
  const int block_size = 4, n_kv = 2, hd = 8, num_blocks = 12, max_seqs = 3, max_blocks = 4;
  const int row = n_kv * hd, kv_stride = row + 3;  // padded token rows
  // A random permutation of the physical blocks dealt to the slots.
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), test::rng());
  std::vector<int32_t> tables(max_seqs * max_blocks);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];

  // Slot 2: positions 0..9 (crosses two block boundaries); slot 0: a few scattered positions.
  std::vector<int32_t> positions, slots;
  for (int p = 0; p < 10; ++p) positions.push_back(p), slots.push_back(2);
  for (int p : {3, 4, 15, 8}) positions.push_back(p), slots.push_back(0);
  const int n = int(positions.size());
  const std::vector<float> k = test::random_floats(size_t(n) * kv_stride);
  const std::vector<float> v = test::random_floats(size_t(n) * kv_stride);

  const size_t block_elems = size_t(2) * block_size * row;
  std::vector<float> pool(num_blocks * block_elems, kPoison);
  KvCacheRef cache{pool.data(), tables.data(), block_size, max_blocks, n_kv, hd};
  launch(kv_write_ref(),
         KvWriteArgs{k.data(), v.data(), positions.data(), slots.data(), cache, n, kv_stride},
         LaunchCtx{});

  std::vector<float> expected(pool.size(), kPoison);
  for (int i = 0; i < n; ++i) {
    const int block = tables[slots[i] * max_blocks + positions[i] / block_size];
    for (int h = 0; h < n_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        // pool[block][kv][row in block][head][d]
        const int r = positions[i] % block_size;
        expected[((size_t(block) * 2 + 0) * block_size + r) * row + h * hd + d] =
            k[size_t(i) * kv_stride + h * hd + d];
        expected[((size_t(block) * 2 + 1) * block_size + r) * row + h * hd + d] =
            v[size_t(i) * kv_stride + h * hd + d];
      }
  }
  size_t bad = 0;
  for (size_t i = 0; i < pool.size(); ++i)
    if (std::memcmp(&pool[i], &expected[i], sizeof(float)) != 0 && bad++ < 5)
      ADD_FAILURE() << "pool[" << i << "] = " << pool[i] << ", expected " << expected[i];
  EXPECT_EQ(bad, 0u);
  // The blocks of slot 1 were never written.
  for (int b = 0; b < max_blocks; ++b)
    for (size_t e = 0; e < block_elems; ++e)
      ASSERT_EQ(pool[tables[max_blocks + b] * block_elems + e], kPoison);
}

TEST(KvWriteCpu, RejectsPositionsOutsideTheTable) {
  const int block_size = 4, n_kv = 1, hd = 2, max_blocks = 2;
  std::vector<int32_t> tables = {0, -1};  // second block not allocated
  std::vector<float> pool(2 * 2 * block_size * n_kv * hd, kPoison), k(hd), v(hd);
  KvCacheRef cache{pool.data(), tables.data(), block_size, max_blocks, n_kv, hd};
  const int32_t slot = 0;
  for (int32_t pos : {-1, 4, 8}) {  // negative, unallocated block, past the table
    EXPECT_THROW(launch(kv_write_ref(), KvWriteArgs{k.data(), v.data(), &pos, &slot, cache, 1, hd},
                        LaunchCtx{}),
                 Error)
        << pos;
  }
  for (float x : pool) ASSERT_EQ(x, kPoison);
}

}  // namespace
}  // namespace lantern::kernels
