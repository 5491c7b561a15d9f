#pragma once
// qkv_rope.5's epilogue for gemm.8's kernel (gemm_wgmma.cu, WgOut::rope, the
// only includer): the fused q/k/v projection's reduced tile rotated with RoPE
// and written where rope_kv_write.1 writes it -- q into q_out, k into qkv and
// the token's paged cache row, v into qkv and the cache row -- so a decode
// step of 17..128 rows launches no rope_kv_write.
//
// A block's 128 weight rows are whole heads when head_dim divides 128, and
// every head's rotation pairs (d, d + head_dim / 2) lie inside the tile. A
// pair item is four dims d0..d0+3 of one head and the four half a head later
// (for a v head the same two quads, stored unrotated): 16 items per batch
// row, whatever head_dim. Block rank `split` takes its share of the items,
// sums both quads over the cluster's ranks in rank order (as
// wg_reduce_store: the same fp32 sums as gemm.8's bf16 store), rounds them
// to bf16 (what rope_kv_write reads from qkv), and rotates with
// rope_kv_write's expression and its sin/cos (double sincos of position x
// inv_freq, rounded to float). So q_out, qkv's k and v columns and the cache
// are bit-identical to gemm.8 + rope_kv_write.1 (tested); qkv's q columns are
// not written (the definition's intermediate, registry.h).
#include <cooperative_groups.h>

#include "kernels/cuda/cuda_common.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

__device__ __forceinline__ void wg_store4(bf16* dst, const float (&o)[4]) {
  const __nv_bfloat162 p[2] = {__floats2bfloat162_rn(o[0], o[1]), __floats2bfloat162_rn(o[2], o[3])};
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(p);
}

// Block rank `split`'s pair items of weight tile `tile_idx` for batch rows
// m0 .. m0 + rows - 1 (tile: this block's fp32 partial tile [batch][ld];
// qkv: the [m, n] rows). kThreads: the block's threads.
template <int kRows, int kLd, int kThreads, int kMaxSplits>
__device__ __forceinline__ void wg_rope_store(const float* tile, cooperative_groups::cluster_group& cluster,
                                              bf16* __restrict__ qkv, int m0, int rows, int n, int tile_idx,
                                              int split, int splits, const RopeOperands& p) {
  constexpr int kItems = kRows / 8;  // pair items per batch row: kRows / head_dim heads x head_dim / 8
  const int hd = p.head_dim, half = hd / 2, per_head = hd / 8;
  const int q_dim = p.n_q_heads * hd, kv_dim = p.n_kv_heads * hd;
  const int i0 = split * kItems / splits, count = (split + 1) * kItems / splits - i0;
  for (int item = threadIdx.x; item < rows * count; item += kThreads) {
    const int b = item / count, pi = i0 + item % count;
    const int lo = pi / per_head * hd + pi % per_head * 4, row = tile_idx * kRows + lo;  // row: the weight row
    if (row >= n) continue;
    float4 v[kMaxSplits], w[kMaxSplits];  // every rank's two quads in flight, then summed in rank order
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r) {
      if (r >= splits) break;
      const float* tp = (r == split ? tile : cluster.map_shared_rank(tile, r)) + b * kLd;
      v[r] = *reinterpret_cast<const float4*>(tp + lo);
      w[r] = *reinterpret_cast<const float4*>(tp + lo + half);
    }
    float x0[4] = {0.f, 0.f, 0.f, 0.f}, x1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r) {
      if (r >= splits) break;
      x0[0] += v[r].x, x0[1] += v[r].y, x0[2] += v[r].z, x0[3] += v[r].w;
      x1[0] += w[r].x, x1[1] += w[r].y, x1[2] += w[r].z, x1[3] += w[r].w;
    }
    const int t = m0 + b, head = row / hd, d0 = row % hd;
    const long long cache_row = kv_cache_row(p.positions[t], p.seq_slots[t], p.block_tables, p.block_size,
                                             p.max_blocks_per_seq, kv_dim);
    bf16* k_dst = cache_row >= 0 ? p.pool + cache_row : nullptr;
    bf16* qkv_row = qkv + size_t(t) * n;
    if (head >= p.n_q_heads + p.n_kv_heads) {  // v: both quads as they are
      wg_store4(qkv_row + row, x0);
      wg_store4(qkv_row + row + half, x1);
      if (k_dst) {
        bf16* vd = k_dst + size_t(p.block_size) * kv_dim + (row - q_dim - kv_dim);
        wg_store4(vd, x0);
        wg_store4(vd + half, x1);
      }
      continue;
    }
    const double dpos = p.positions[t];
    float y0[4], y1[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      double sn, cs;
      sincos(dpos * double(p.inv_freq[d0 + e]), &sn, &cs);
      const float c = float(cs), s = float(sn);
      const float a0 = __bfloat162float(__float2bfloat16(x0[e])), a1 = __bfloat162float(__float2bfloat16(x1[e]));
      rope_rotate(a0, a1, c, s, y0[e], y1[e]);
    }
    if (head < p.n_q_heads) {
      bf16* q = p.q_out + size_t(t) * q_dim + row;
      wg_store4(q, y0);
      wg_store4(q + half, y1);
      continue;
    }
    wg_store4(qkv_row + row, y0);
    wg_store4(qkv_row + row + half, y1);
    if (k_dst) {
      wg_store4(k_dst + (row - q_dim), y0);
      wg_store4(k_dst + (row - q_dim) + half, y1);
    }
  }
}

}  // namespace
}  // namespace lantern::kernels
