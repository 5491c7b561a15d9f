#pragma once
// The skinny GEMV's pieces that are not the kernel (gemm_skinny.cu, the only
// includer): its shape constants, what its epilogue writes (SkOut, SkTail),
// the prologue norm's operands (SkNorm), the rope epilogue's operands and
// pieces (SkRope, rope_prepare, rope_store), one row of the residual_norm
// tail, and the deferred norm's prologue (the staged rows' 1 / rms, norm8).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/rope_tile.h"

namespace lantern::kernels::skinny_detail {
using namespace cuda_detail;

constexpr int kSkWarps = 8;          // warps per block, splitting the block's k range
constexpr int kSkRows = 16;          // rows of w per tile (the mma's m side)
constexpr int kSkMaxM = 16;          // two mma n-tiles of 8 batch rows
constexpr int kSkMaxSplits = 8;      // blocks per cluster (portable cluster size)
constexpr int kSkDefaultSplits = 2;  // measured: larger clusters cost more than they add
constexpr int kSkNormMaxK = 2048;    // kNorm: the k range of a block whose norm weight shared memory holds
constexpr size_t kSkNormMaxRowBytes = size_t(160) << 10;  // kNorm: x's m rows in shared memory (2 blocks/SM fit)

// What the epilogue writes: c as bf16 or fp32 [m, n], or (swiglu) silu(g) * u
// as bf16 [m, n] where w holds 2n rows, gate rows then up rows, or
// (residual_norm) c as bf16 and then, in the last block, x += c and
// out = rmsnorm(x) * norm_weight.
// (residual_add, proj_residual_norm.4) x += c rounded as residual.* rounds
// it, in place, c itself not stored: each output element has one storing block.
// (rope, qkv_rope.2) the fused q/k/v projection's rows with RoPE and the KV
// write: rotated q into q_out, rotated k and v into c (qkv) and the paged
// cache (SkRope, rope_tile).
// (rope_attn, qkv_rope.4) rope's stores, then the decode attention of each kv
// head group in the group's last stored block (qkv_attn_tail.cuh).
enum class SkOut { bf16, f32, swiglu, residual_norm, residual_add, rope, rope_attn };

// The prologue norm (PrologueNorm, kNorm): a is the residual stream x and the
// A operand is bf16(x * inv_rms(row) * weight), rmsnorm's rounding. Every
// block reads its m rows of x whole (m x 4 KB at hidden 2048, from L2) for
// the rows' sums of squares, then normalises the chunks it multiplies.
struct SkNorm {
  const bf16* weight;  // [k]; unused without kNorm
  float eps;
};

// The residual_norm tail's operands (unused by the other outputs).
struct SkTail {
  bf16* x;                  // [m, n] residual stream, updated in place
  const bf16* norm_weight;  // [n]
  bf16* out;                // [m, n]
  float eps;
};

// The rope epilogue's operands (unused by the other outputs): RopeOperands
// with c as the qkv rows ([m, n], n = q_dim + 2 kv_dim).
struct SkRope : RopeOperands {
  // rope_attn only (qkv_attn_tail.cuh): the folded decode attention.
  bf16* attn_out;               // [m, n_q_heads * head_dim]
  const int32_t* context_lens;  // [m], including the token this launch writes
  float attn_scale;
  int attn_flags;               // kAttnPrefetch | kAttnEarlyTrigger
  unsigned int* attn_arrivals;  // [n_kv_heads]: the groups' counters, this stream's set (zero between launches)
};

// rope_tile (kernels/cuda/rope_tile.h): which weight rows a tile multiplies.

// rope, after the dependency wait (positions and block tables are step
// metadata): per (dim of the tile, batch row) the rotation's cos / sin in
// double, as rope_kv_write makes them, by threads 0 .. 8m - 1; per batch row
// its cache row (kv_cache_row; -1: no cache write) by the threads from 128
// (k and v tiles only). The block barrier before the epilogue publishes them.
static_assert(8 * kSkMaxM <= 128 && 128 + kSkMaxM <= kSkWarps * kWarp);
__device__ __forceinline__ void rope_prepare(const SkRope& p, const RopeTile& rt, int m, float (&cs_s)[8][kSkMaxM],
                                             float (&sn_s)[8][kSkMaxM], long long (&dst_s)[kSkMaxM]) {
  const int tid = threadIdx.x, b = tid - 128;
  if (rt.head >= 0 && tid < 8 * m) {
    const int e = tid % 8, row = tid / 8;
    double sn, cs;
    sincos(double(p.positions[row]) * double(p.inv_freq[rt.j0 + e]), &sn, &cs);
    cs_s[e][row] = float(cs);
    sn_s[e][row] = float(sn);
  }
  if ((rt.head < 0 || rt.head >= p.n_q_heads) && b >= 0 && b < m)
    dst_s[b] = kv_cache_row(p.positions[b], p.seq_slots[b], p.block_tables, p.block_size, p.max_blocks_per_seq,
                            p.n_kv_heads * p.head_dim);
}

// The rope epilogue's store of one reduced item (v: row_in_tile's sum for
// `batch`; every lane of the warp calls it). A rotation tile's items r = 0, 1
// hold dim j0 + row_in_tile of the pair and items r + 2 (two lanes up) the
// dim half later: both are rounded to bf16 first (what rope_kv_write reads
// from qkv), rotated with rope_kv_write's formulas and stores -- q into q_out,
// k into qkv and the cache row -- so the bits are the unfused path's. A v
// tile's items store their own row into qkv and the cache row.
__device__ __forceinline__ void rope_store(const SkRope& p, const RopeTile& rt, bf16* qkv, float v, int r,
                                           int row_in_tile, int batch, int m, int n,
                                           const float (&cs_s)[8][kSkMaxM], const float (&sn_s)[8][kSkMaxM],
                                           const long long (&dst_s)[kSkMaxM]) {
  const float hi = __shfl_down_sync(0xffffffffu, v, 2);
  if (batch >= m) return;
  const int hd = p.head_dim, half = hd / 2, q_dim = p.n_q_heads * hd, kv_dim = p.n_kv_heads * hd;
  if (rt.head < 0) {
    const int row = rt.row0 + row_in_tile;
    if (row >= n) return;
    const bf16 y = __float2bfloat16(v);
    qkv[size_t(batch) * n + row] = y;
    if (dst_s[batch] >= 0) p.pool[dst_s[batch] + size_t(p.block_size) * kv_dim + (row - q_dim - kv_dim)] = y;
    return;
  }
  if (r >= 2) return;
  const int d = rt.j0 + row_in_tile;
  const float x0 = __bfloat162float(__float2bfloat16(v)), x1 = __bfloat162float(__float2bfloat16(hi));
  const float c = cs_s[row_in_tile][batch], s = sn_s[row_in_tile][batch];
  float y0, y1;
  rope_rotate(x0, x1, c, s, y0, y1);
  const bf16 b0 = __float2bfloat16(y0), b1 = __float2bfloat16(y1);
  if (rt.head < p.n_q_heads) {
    bf16* q = p.q_out + size_t(batch) * q_dim + rt.head * hd + d;
    q[0] = b0;
    q[half] = b1;
    return;
  }
  const int col = (rt.head - p.n_q_heads) * hd + d;  // in the k row
  bf16* kq = qkv + size_t(batch) * n + q_dim + col;
  kq[0] = b0;
  kq[half] = b1;
  if (dst_s[batch] >= 0) {
    bf16* kc = p.pool + dst_s[batch] + col;
    kc[0] = b0;
    kc[half] = b1;
  }
}

constexpr int kTailVecs = 8;  // 16-byte vectors per lane: rows up to 8 * 32 * 8 = 2048 wide

// One row of the tail: x += y (rounded), out = rmsnorm(x) * weight, with
// add_rmsnorm.1's lane layout and order (its add_rmsnorm_reg_kernel<8>). All
// loads go out together; y is read through L2 (other blocks wrote it).
__device__ __forceinline__ void tail_row(const SkTail& t, const bf16* y, int row, int hidden, int lane) {
  const int vecs = hidden / 8;
  uint4* xr = reinterpret_cast<uint4*>(t.x + size_t(row) * hidden);
  const uint4* yr = reinterpret_cast<const uint4*>(y + size_t(row) * hidden);
  const uint4* wr = reinterpret_cast<const uint4*>(t.norm_weight);
  uint4 xv[kTailVecs], yv[kTailVecs], wv[kTailVecs];
#pragma unroll
  for (int c = 0; c < kTailVecs; ++c) {
    const int idx = c * kWarp + lane;
    xv[c] = yv[c] = wv[c] = make_uint4(0, 0, 0, 0);
    if (idx < vecs) {
      xv[c] = xr[idx];
      yv[c] = __ldcg(yr + idx);
      wv[c] = __ldg(wr + idx);
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kTailVecs; ++c) {
    float v[8], b[8];
    unpack8(xv[c], v);
    unpack8(yv[c], b);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] += b[e];
    xv[c] = pack8(v);   // the residual stream, rounded as residual.* rounds it
    unpack8(xv[c], v);  // ... and the norm reads the rounded values
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
    const int idx = c * kWarp + lane;
    if (idx < vecs) xr[idx] = xv[c];
  }
  ss = warp_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / hidden + t.eps);
  uint4* o = reinterpret_cast<uint4*>(t.out + size_t(row) * hidden);
#pragma unroll
  for (int c = 0; c < kTailVecs; ++c) {
    const int idx = c * kWarp + lane;
    if (idx < vecs) {
      float v[8], wf[8];
      unpack8(xv[c], v);
      unpack8(wv[c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv_rms * wf[e];
      o[idx] = pack8(v);
    }
  }
}

// kNorm, after the dependency wait: the m rows of x into shared memory `xs`
// ([m, k], one cp.async round trip; no registers held across it), then the
// rows' 1 / rms (rmsnorm's formula) into inv_rms[0, m). The sums of squares
// are this block's own (another order than the rmsnorm kernel's).
__device__ __forceinline__ void prologue_rows(const bf16* __restrict__ x, bf16* xs, int m, int k, float eps,
                                              float* inv_rms) {
  __shared__ float part[kSkWarps][kSkMaxM];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int vecs = m * k / 8;
  for (int v = threadIdx.x; v < vecs; v += kSkWarps * kWarp) cp_async16(xs + size_t(v) * 8, x + size_t(v) * 8, true);
  cp_async_commit();
  cp_async_wait<0>();  // also the norm weight's copy, committed before the wait
  __syncthreads();
  for (int r = 0; r < m; ++r) {
    float ss = 0.0f;
    for (int v = threadIdx.x; v < k / 8; v += kSkWarps * kWarp) {
      float f[8];
      unpack8(*reinterpret_cast<const uint4*>(xs + size_t(r) * k + v * 8), f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
    }
    ss = warp_sum(ss);
    if (lane == 0) part[warp][r] = ss;
  }
  __syncthreads();
  if (threadIdx.x < m) {
    float t = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kSkWarps; ++wi) t += part[wi][threadIdx.x];
    inv_rms[threadIdx.x] = 1.0f / sqrtf(t / k + eps);
  }
  __syncthreads();
}

// bf16(x * inv * weight) elementwise (rmsnorm's rounding), 8 elements.
__device__ __forceinline__ uint4 norm8(const uint4& x, const uint4& wt, float inv) {
  float v[8], wf[8];
  unpack8(x, v);
  unpack8(wt, wf);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = v[e] * inv * wf[e];
  return pack8(v);
}

}  // namespace lantern::kernels::skinny_detail
