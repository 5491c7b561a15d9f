// The prefill attention's balanced block order (kernels/cuda/prefill_order.h,
// LANTERN_PREFILL_BALANCE=1), checked on the CPU: wherever it applies, every
// (query tile, head) item goes to exactly one block, and -- with the blocks L
// and L + sms on one SM, as the block scheduler places a wave on idle SMs (the
// H200 probe's recorded SM ids, docs/performance.md session 32) -- no SM holds
// more key tiles than the heaviest item plus one, where the plain order puts
// two heavy items together. A wrong rank here is a tile computed twice and
// one never computed there.
#include "kernels/cuda/prefill_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace lantern::kernels::prefill_order {
namespace {

// Key tiles of the item at `rank`: query tile `tiles - 1 - rank / heads` attends to that many + 1.
int key_tiles(int rank, int tiles, int heads) { return tiles - rank / heads; }

// The largest key-tile sum over SMs when SM s holds linear blocks s and s + sms.
int max_per_sm(const std::vector<int>& rank_of_block, int tiles, int heads, int sms) {
  std::vector<int> per(sms, 0);
  for (size_t lin = 0; lin < rank_of_block.size(); ++lin)
    per[lin % sms] += key_tiles(rank_of_block[lin], tiles, heads);
  return *std::max_element(per.begin(), per.end());
}

void check(int tokens, int heads, int sms) {
  SCOPED_TRACE(testing::Message() << tokens << " tokens, " << heads << " heads, " << sms << " SMs");
  const int tiles = (tokens + 63) / 64, blocks = tiles * heads;
  ASSERT_TRUE(balanced_fits(blocks, sms));
  std::vector<int> seen(blocks, 0), balanced(blocks), plain(blocks);
  for (int lin = 0; lin < blocks; ++lin) {
    const int r = balanced_rank(lin, blocks, sms);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, blocks);
    ++seen[r];
    balanced[lin] = r;
    // The plain order: block (x, y) = (tile from the last, head) is rank x * heads + y.
    plain[lin] = (lin % tiles) * heads + lin / tiles;
  }
  for (int r = 0; r < blocks; ++r) EXPECT_EQ(seen[r], 1) << "rank " << r;
  const int heaviest = tiles, lightest = 1;
  EXPECT_LE(max_per_sm(balanced, tiles, heads, sms), heaviest + lightest);
  if (tiles >= 4) {
    EXPECT_GT(max_per_sm(plain, tiles, heads, sms), heaviest + lightest) << "nothing to balance";
  }
}

TEST(PrefillOrder, EveryItemOnceAndAnSmsBlocksBalanced) {
  check(512, 32, 132);   // the goal's prompt on the H200: 256 blocks
  check(300, 32, 132);   // 5 query tiles: 160 blocks
  check(2048, 8, 132);   // 32 tiles x 8 heads: 256 blocks
  check(512, 32, 128);   // another SM count
  check(513, 24, 132);   // a partial last tile: 9 x 24 = 216 blocks
}

TEST(PrefillOrder, AppliesToOneWaveOfTwoBlocksPerSmOnly) {
  EXPECT_FALSE(balanced_fits(132, 132)) << "one block per SM: nothing shares an SM";
  EXPECT_TRUE(balanced_fits(133, 132));
  EXPECT_TRUE(balanced_fits(264, 132));
  EXPECT_FALSE(balanced_fits(265, 132)) << "a second wave: heaviest-first already balances";
  EXPECT_FALSE(balanced_fits(1024, 132));
}

}  // namespace
}  // namespace lantern::kernels::prefill_order
