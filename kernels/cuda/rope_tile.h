#pragma once
// Which weight rows a 16-row tile of qkv_rope.2's GEMV multiplies (the rope
// epilogue, gemm_skinny.cu SkOut::rope) -- host and device code, so a CPU test
// (tests/kernels/rope_tile_test.cpp) checks the map the kernel uses.
//
// Rows of the fused q/k/v weight: n_q_heads q heads, n_kv_heads k heads (each
// head_dim rows), then kv_dim v rows. The first (n_q_heads + n_kv_heads) *
// head_dim / 16 tiles rotate: tile t holds dims j0 .. j0 + 7 of head `head`
// (the mma's rows 0-7: lo rows) and the dims half a head later that RoPE
// pairs with them (rows 8-15: hi rows), so a fragment lane's c0/c1 and c2/c3
// are the two halves of one rotation pair -- two lanes apart after the
// cross-warp sum, as the swiglu epilogue pairs gate and up. The remaining
// tiles are v's rows row0 .. row0 + 15 in order (head = -1). Needs head_dim
// % 16 == 0 and kv_dim % 16 == 0 (qkv_rope_skinny_launch checks).
#include "kernels/base/host_device.h"

namespace lantern::kernels::skinny_detail {

struct RopeTile {
  int head, j0, row0;  // head >= 0: a rotation tile of that head (row0 = head * head_dim); -1: v rows from row0
  int half;            // head_dim / 2
  // The weight row of the mma's row g (lo: rows 0-7) and g + 8 (hi).
  LANTERN_HD int lo_row(int g) const { return row0 + j0 + g; }
  LANTERN_HD int hi_row(int g) const { return head >= 0 ? row0 + j0 + g + half : row0 + g + 8; }
};

LANTERN_HD RopeTile rope_tile(int n_q_heads, int n_kv_heads, int head_dim, int tile) {
  constexpr int kRows = 16;
  const int per_head = head_dim / 16, rot_tiles = (n_q_heads + n_kv_heads) * per_head;
  if (tile < rot_tiles) return {tile / per_head, (tile % per_head) * 8, (tile / per_head) * head_dim, head_dim / 2};
  return {-1, 0, (n_q_heads + n_kv_heads) * head_dim + (tile - rot_tiles) * kRows, head_dim / 2};
}

// qkv_rope.4 (the attention folded in, qkv_attn_tail.cuh): which kv head's
// group a tile serves -- q tiles of the group's q heads (head / (n_q / n_kv)),
// the head's k tiles, its v tiles -- and its index among the group's `tiles`
// tiles (q first, then k, then v). The group's last tile to be stored runs
// the group's attention.
struct AttnGroupTile {
  int group, index, tiles;
};

LANTERN_HD AttnGroupTile attn_group_tile(int n_q_heads, int n_kv_heads, int head_dim, int tile) {
  const int per_head = head_dim / 16, per_kv = n_q_heads / n_kv_heads;
  const int q_tiles = n_q_heads * per_head, rot_tiles = (n_q_heads + n_kv_heads) * per_head;
  const int tiles = (per_kv + 2) * per_head;
  if (tile < q_tiles) {
    const int head = tile / per_head;
    return {head / per_kv, (head % per_kv) * per_head + tile % per_head, tiles};
  }
  if (tile < rot_tiles) return {tile / per_head - n_q_heads, per_kv * per_head + tile % per_head, tiles};
  const int v_tile = tile - rot_tiles;  // 16 v rows: head_dim / 16 tiles per kv head
  return {v_tile / per_head, (per_kv + 1) * per_head + v_tile % per_head, tiles};
}

}  // namespace lantern::kernels::skinny_detail
