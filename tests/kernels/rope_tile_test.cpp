// qkv_rope.2's tile map (kernels/cuda/rope_tile.h), checked on the CPU: over
// all tiles of a fused q/k/v weight, every row is multiplied exactly once; a
// rotation tile's lo row (the mma's row g) and hi row (g + 8) are dims d and
// d + head_dim / 2 of the same q or k head, d in the first half; v tiles hold
// v's rows in order. The kernel's epilogue writes a rotation pair from one
// lane, so a wrong pair here is a wrong rotation there. And qkv_rope.4's
// grouping of the tiles by kv head (attn_group_tile).
#include "kernels/cuda/rope_tile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace lantern::kernels::skinny_detail {
namespace {

void check_map(int n_q, int n_kv, int hd) {
  SCOPED_TRACE(testing::Message() << "heads " << n_q << "/" << n_kv << " head_dim " << hd);
  const int rot_rows = (n_q + n_kv) * hd, cols = rot_rows + n_kv * hd, tiles = cols / 16;
  ASSERT_EQ(cols % 16, 0);
  std::vector<int> seen(cols, 0);
  for (int t = 0; t < tiles; ++t) {
    const RopeTile rt = rope_tile(n_q, n_kv, hd, t);
    for (int g = 0; g < 8; ++g) {
      const int lo = rt.lo_row(g), hi = rt.hi_row(g);
      ASSERT_GE(lo, 0);
      ASSERT_LT(hi, cols);
      ++seen[lo];
      ++seen[hi];
      if (rt.head >= 0) {
        EXPECT_LT(lo, rot_rows) << "tile " << t;
        EXPECT_EQ(lo / hd, rt.head) << "tile " << t;
        EXPECT_EQ(hi / hd, rt.head) << "tile " << t << ": the pair stays in its head";
        EXPECT_LT(lo % hd, hd / 2) << "tile " << t << ": lo is in the first half";
        EXPECT_EQ(hi - lo, hd / 2) << "tile " << t << ": RoPE pairs d with d + head_dim / 2";
        EXPECT_EQ(rt.j0 + g, lo % hd) << "the epilogue's dim (j0 + row_in_tile)";
      } else {
        EXPECT_GE(lo, rot_rows) << "tile " << t;
        EXPECT_EQ(lo, rt.row0 + g);
        EXPECT_EQ(hi, rt.row0 + g + 8) << "v rows in order";
      }
    }
  }
  for (int r = 0; r < cols; ++r) EXPECT_EQ(seen[r], 1) << "row " << r;
}

TEST(RopeTile, EveryRowOnceAndPairsHalfAHeadApart) {
  check_map(32, 8, 64);   // Llama-3.2-1B: 192 tiles, 160 rotating
  check_map(4, 2, 128);
  check_map(2, 1, 48);    // 3 tiles per head
  check_map(24, 8, 128);  // Llama-3.2-3B
  check_map(1, 1, 16);    // one tile per head
}

// qkv_rope.4's groups (attn_group_tile): every tile belongs to the kv head
// whose attention reads its rows -- a q head's tiles to the kv head its GQA
// group shares, a k or v tile to its own head -- and each group's tiles
// carry the indices 0 .. tiles - 1 once each, so the group's arrival count
// (tiles) is reached by exactly its last stored tile.
void check_groups(int n_q, int n_kv, int hd) {
  SCOPED_TRACE(testing::Message() << "heads " << n_q << "/" << n_kv << " head_dim " << hd);
  const int q_dim = n_q * hd, kv_dim = n_kv * hd, tiles = (q_dim + 2 * kv_dim) / 16, per_kv = n_q / n_kv;
  std::vector<std::vector<int>> seen(n_kv);
  for (int t = 0; t < tiles; ++t) {
    const AttnGroupTile gt = attn_group_tile(n_q, n_kv, hd, t);
    ASSERT_GE(gt.group, 0) << "tile " << t;
    ASSERT_LT(gt.group, n_kv) << "tile " << t;
    EXPECT_EQ(gt.tiles, (per_kv + 2) * hd / 16);
    const RopeTile rt = rope_tile(n_q, n_kv, hd, t);
    const int row = rt.lo_row(0);  // any of the tile's rows: one head's
    const int head_of_row = row < q_dim            ? row / hd / per_kv
                            : row < q_dim + kv_dim ? (row - q_dim) / hd
                                                   : (row - q_dim - kv_dim) / hd;
    EXPECT_EQ(gt.group, head_of_row) << "tile " << t << " (row " << row << ")";
    seen[gt.group].push_back(gt.index);
  }
  for (int g = 0; g < n_kv; ++g) {
    std::vector<int> idx = seen[g];
    std::sort(idx.begin(), idx.end());
    ASSERT_EQ(int(idx.size()), (per_kv + 2) * hd / 16) << "group " << g;
    for (int i = 0; i < int(idx.size()); ++i) EXPECT_EQ(idx[i], i) << "group " << g;
  }
}

TEST(RopeTile, AttentionGroupsCoverEachKvHeadsTilesOnce) {
  check_groups(32, 8, 64);  // Llama-3.2-1B: 24 tiles per group
  check_groups(4, 2, 64);
  check_groups(8, 2, 64);
  check_groups(24, 8, 128);
  check_groups(2, 2, 16);
}

}  // namespace
}  // namespace lantern::kernels::skinny_detail
