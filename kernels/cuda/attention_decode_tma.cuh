#pragma once
// Device pieces of the decode attention kernels whose K/V ring the Tensor
// Memory Accelerator fills (attention_decode_tma.cu: variants 16 and 17;
// attention_decode_persist.cu: variants 18 and 19): the tile shape, the stage
// mbarriers, the TMA box copies of a 64-key tile, one warp's part of a landed
// stage; and the host pieces both files call. The design notes are at the top
// of attention_decode_tma.cu.
#include "kernels/cuda/attention_decode_pipe.cuh"
#include "kernels/cuda/tma_common.cuh"

namespace lantern::kernels::cuda_detail {

constexpr int kHd = 64, kBoxKeys = 16;
template <int St>
using TS = PipeShape<kHd, 1, 4, St, true>;  // 64-key tiles, 128-byte unpadded swizzled rows
static_assert(TS<2>::kStride == kHd && TS<2>::kTileKeys == 4 * kBoxKeys);
constexpr unsigned kStageBytes = 2 * TS<2>::kTileKeys * TS<2>::kStride * sizeof(bf16);  // K then V: 16 KB
__device__ __forceinline__ void tma_rows(bf16* dst, const CUtensorMap* map, int kv, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(kv), "r"(row), "r"(smem_u32(bar))
      : "memory");
}

// The K and V boxes of 16-key group kg of the split's tile `tile` into stage buffer k_s.
__device__ __forceinline__ void tma_group(const CUtensorMap* map, const PipeSplit& p, int kv, int tile, int kg,
                                          bf16* k_s, uint64_t* bar) {
  constexpr int kTileKeys = 4 * kBoxKeys, kStride = kHd;
  const int t0 = p.begin + tile * kTileKeys + kg * kBoxKeys;
  const int blk = t0 < p.end ? p.table_s[p.blk_of(t0) - p.first_blk] : -1;
  const int row_k = blk >= 0 ? blk * 2 * p.block_size + p.row_of(t0) : -4 * kBoxKeys;  // negative: zeros
  const int row_v = blk >= 0 ? row_k + p.block_size : row_k;
  tma_rows(k_s + kg * kBoxKeys * kStride, map, kv, row_k, bar);
  tma_rows(k_s + (kTileKeys + kg * kBoxKeys) * kStride, map, kv, row_v, bar);
}

__device__ __forceinline__ bf16* stage_at(bf16* stages, int s) {
  return stages + size_t(s) * (kStageBytes / sizeof(bf16));
}

// Tile `tile` of the split (the four groups' K and V boxes) into stage buffer k_s, completing on bar.
__device__ __forceinline__ void tma_tile(const CUtensorMap* map, const PipeSplit& p, int kv, int tile, bf16* k_s,
                                         uint64_t* bar) {
  mbar_expect_tx(bar, kStageBytes);
  for (int kg = 0; kg < 4; ++kg) tma_group(map, p, kv, tile, kg, k_s, bar);
}

// Before the PDL wait: tiles 0 .. n - 1 into stages 0 .. n - 1, all but the
// newest K/V row's 16-key group (this step's rope_kv_write writes that row),
// whose boxes tma_newest_group issues after the wait -- only if it lies in
// those n tiles (a split that ends before the newest key holds no such group).
__device__ __forceinline__ void tma_first_tiles(const CUtensorMap* map, const PipeSplit& p, int kv, int n,
                                                int newest_group, bf16* stages, uint64_t* full) {
  for (int t = 0; t < n; ++t) {
    mbar_expect_tx(&full[t], kStageBytes);
    for (int kg = 0; kg < 4; ++kg)
      if (t * 4 + kg != newest_group) tma_group(map, p, kv, t, kg, stage_at(stages, t), &full[t]);
  }
}
__device__ __forceinline__ void tma_newest_group(const CUtensorMap* map, const PipeSplit& p, int kv, int n,
                                                 int newest_group, bf16* stages, uint64_t* full) {
  const int t = newest_group / 4;
  if (newest_group >= 0 && t < n) tma_group(map, p, kv, t, newest_group % 4, stage_at(stages, t), &full[t]);
}

// The V rows of a warp's 16 keys from kbase (128-byte rows at v_s) past the
// split's end -- stale rows of the context's last cache block -- zeroed, so
// p = 0 there cannot meet a NaN; then a proxy fence (TMA refills the stage).
__device__ __forceinline__ void zero_stale_v(bf16* v_s, int kbase, int end) {
  if (kbase + kWarpKeys <= end) return;
  for (int u = threadIdx.x % kWarp; u < kWarpKeys * 8; u += kWarp)
    if (kbase + u / 8 >= end) reinterpret_cast<uint4*>(v_s)[u] = make_uint4(0, 0, 0, 0);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
}

// One warp's 16 keys (from kbase; its K rows at k_s, the tile's V rows 64 rows
// on) of a landed stage: the V rows past the split's end -- stale rows of the
// context's last cache block -- are zeroed first, then variant 14's
// transposed warp tile.
__device__ __forceinline__ void tma_warp_tile(const PipeSplit& p, bf16* k_s, int kbase,
                                              const uint32_t (&qb)[kHd / 16][2], float scale_log2,
                                              float (&o)[kHd / 16][4], float (&m)[2], float (&l)[2]) {
  constexpr int kStride = kHd, kTileKeys = 4 * kBoxKeys;
  const int lane = threadIdx.x % kWarp, g = lane / 4;
  bf16* v_s = k_s + kTileKeys * kStride;
  zero_stale_v(v_s, kbase, p.end);
  const bool ok[2] = {p.key_ok(kbase + g), p.key_ok(kbase + g + 8)};
  pipe_warp_tile_t<kHd, kStride, true>(qb, k_s, v_s, ok, scale_log2, o, m, l);
}

// Host pieces (attention_decode_tma.cu).
// The paged pool as a tensor map of rows of one kv head, encoded once per pool and thread.
const CUtensorMap& pool_rows_map(const KvCacheRef& c);
// Head_dim 64, block sizes that are multiples of 16, GQA groups <= 8.
bool tma_supports(const AttentionDecodeArgs& a);
// Variant 17 as a launcher (variant 19 runs it below 24 rows).
// one_short (variant 20): contexts of up to 256 keys run as one split.
void decode_tma_split_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx, bool one_short = false);
// Variant 20 as a launcher (variant 21 runs it where its rows kernel does not apply).
void decode_split_persist_one_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx);

}  // namespace lantern::kernels::cuda_detail
