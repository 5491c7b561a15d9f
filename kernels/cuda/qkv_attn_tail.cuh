#pragma once
// qkv_rope.4 (gemv_rope_attn): the decode attention folded into the q/k/v
// GEMV with the RoPE + KV-write epilogue (gemm_skinny.cu, SkOut::rope_attn;
// the only includer).
//
// Why: on a batch-1 step the attention kernel spends ~6 us per layer on the
// critical path for ~0.1 MB of K/V (docs/performance.md, session 32's path
// table) -- its launch, its PDL wait for the q/k/v GEMV's completion and its
// own ramp. Here the GEMV's tiles are grouped by kv head (attn_group_tile:
// the group's q heads' tiles, its k tiles, its v tiles); the group's last
// stored block -- after a fence and one counter per group -- computes that
// kv head's attention for every row, with q and the newest k / v just
// written by the group's other blocks, so the separate attention launch and
// its kernel boundary are gone. The context's older K/V rows do not depend on
// this launch: every block of the group prefetches its share into L2 right
// after the dependency wait, while the weights stream.
//
// The tail (256 threads; head_dim 64, up to 4 q heads per kv head): keys in
// chunks of 256 with an online softmax per head --
//   - the chunk's V rows (256 x 128 B) go into shared memory by cp.async at
//     the chunk's start and land while the scores are made;
//   - scores: one key per thread, its K row (8 x 16 B from L2) against the
//     group's q heads (fp32, dims in order), times the scale;
//   - per head the chunk's max (warp max, then the 8 warps' in order), the
//     rescale exp(m_old - m_new), p = exp(s - m_new), their sum;
//   - P V: lane l owns dims 2l, 2l + 1 of every head, warp w keys w, w + 8, ...;
//     after the last chunk the 8 warps' partial sums are added in warp order
//     and divided by the softmax sum.
// Every sum has a fixed order, so the result is deterministic; it is not the
// attention_decode kernels' order (qkv_rope_gpu_test compares it with the CPU
// reference and with qkv_rope.3 + attention_decode within a tolerance).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_skinny_parts.cuh"
#include "kernels/cuda/rope_tile.h"

namespace lantern::kernels::skinny_detail {

constexpr int kAttnHd = 64;          // the head_dim the tail handles
constexpr int kAttnMaxPerKv = 4;     // q heads per kv head
constexpr int kAttnChunk = 256;      // keys per chunk: one per thread for the scores
constexpr int kAttnMaxKvHeads = 32;  // the per-group arrival counters
constexpr int kAttnMaxRows = 8;      // rows of one launch (the last block of a group runs them in turn)
constexpr int kAttnPrefetch = 1, kAttnEarlyTrigger = 2;  // SkRope::attn_flags
static_assert(kSkWarps * kWarp == kAttnChunk, "one key per thread");
static_assert(kAttnMaxPerKv * kAttnHd == kSkWarps * kWarp, "one output element per thread");

// The tail's shared memory (dynamic, after the prologue norm's rows): ~38 KB,
// so two blocks (with the GEMV's ~6 KB of static shared memory each) fit the
// 100 KB a one-row step's 50 % carveout may leave an SM -- at one block per SM
// the 192-tile GEMV would run in two waves.
struct alignas(16) AttnSmem {
  union {
    uint16_t v[kAttnChunk][kAttnHd];              // the chunk's V rows (bf16 bits)
    float pv[kSkWarps][kAttnMaxPerKv * kAttnHd];  // after the last chunk: the warps' partials of P V
  };
  float q[kAttnMaxPerKv][kAttnHd];        // the group's rotated q heads
  float4 p[kAttnChunk];                   // per key, the heads' softmax weights
  float red[2][kSkWarps][kAttnMaxPerKv];  // warp maxima, warp sums
  int last;
};
static_assert(sizeof(AttnSmem) <= 40 * 1024, "two blocks per SM under a 100 KB carveout");

// The K row of key j of a sequence's paged cache at the group's head (V:
// + block_size * kv_dim); nullptr when the table has no block there.
struct AttnRow {
  const bf16* pool;
  const int32_t* table;
  int block_size, max_blocks, kv_dim, head_off;
  __device__ __forceinline__ const bf16* key(int j) const {
    const int blk = j / block_size;
    if (blk >= max_blocks) return nullptr;
    const int page = table[blk];
    return page < 0 ? nullptr : pool + (size_t(page) * 2 * block_size + j % block_size) * kv_dim + head_off;
  }
};

__device__ __forceinline__ AttnRow attn_row(const SkRope& p, int group, int b) {
  return AttnRow{p.pool, p.block_tables + size_t(p.seq_slots[b]) * p.max_blocks_per_seq, p.block_size,
                 p.max_blocks_per_seq, p.n_kv_heads * p.head_dim, group * p.head_dim};
}

// After the dependency wait: the group's blocks prefetch the older keys' K
// and V rows (one 128-byte line each at head_dim 64) into L2, each block a
// share. `who` / `blocks`: this block's index among the group's blocks.
__device__ __forceinline__ void attn_prefetch(const SkRope& p, int group, int who, int blocks, int m) {
  const int threads = kSkWarps * kWarp;
  for (int b = 0; b < m; ++b) {
    const AttnRow r = attn_row(p, group, b);
    const int older = p.context_lens[b] - 1;  // the newest key is this launch's write
    const size_t v_off = size_t(r.block_size) * r.kv_dim;
    for (int i = who * threads + int(threadIdx.x); i < 2 * older; i += blocks * threads) {
      const bf16* row = r.key(i >> 1);
      if (row) asm volatile("prefetch.L2 [%0];" ::"l"(row + ((i & 1) ? v_off : 0)));  // generic address
    }
  }
}

// 16 bytes from L2 (other blocks of this launch wrote them: not through L1).
__device__ __forceinline__ uint4 ldcg16(const bf16* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }

// One chunk's softmax step (every thread; sc: its key's scores, -inf where
// none): per head the chunk's max (warp max, then the 8 warps' in order), the
// new running max m_run, alpha = exp(m_old - m_new) for the old sums, and
// p = exp(s - m_new) into s.p[t] with each warp's sum of p in s.red[1]. The
// caller's next barrier publishes s.p and s.red[1].
__device__ __forceinline__ void chunk_softmax(const float (&sc)[kAttnMaxPerKv], float (&m_run)[kAttnMaxPerKv],
                                              float (&alpha)[kAttnMaxPerKv], AttnSmem& s) {
  const int t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
#pragma unroll
  for (int h = 0; h < kAttnMaxPerKv; ++h) {
    const float v = warp_max(sc[h]);
    if (lane == 0) s.red[0][warp][h] = v;
  }
  __syncthreads();
  float pr[kAttnMaxPerKv];
#pragma unroll
  for (int h = 0; h < kAttnMaxPerKv; ++h) {
    float cmax = s.red[0][0][h];
    for (int w = 1; w < kSkWarps; ++w) cmax = fmaxf(cmax, s.red[0][w][h]);
    const float m_new = fmaxf(m_run[h], cmax);
    alpha[h] = m_new == -INFINITY ? 1.0f : expf(m_run[h] - m_new);
    m_run[h] = m_new;
    pr[h] = sc[h] == -INFINITY ? 0.0f : expf(sc[h] - m_new);
    const float v = warp_sum(pr[h]);
    if (lane == 0) s.red[1][warp][h] = v;
  }
  s.p[t] = make_float4(pr[0], pr[1], pr[2], pr[3]);
}

// After the last chunk: the 8 warps' P V partials (lane l: dims 2l, 2l + 1 of
// each head) added in warp order, divided by the heads' softmax sums and
// stored as bf16 at out (the group's per_kv heads, contiguous).
__device__ __forceinline__ void store_row(const float (&acc)[kAttnMaxPerKv][2], const float (&l_run)[kAttnMaxPerKv],
                                          int per_kv, bf16* out, AttnSmem& s) {
  const int t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
  __syncthreads();  // the last chunk's reads of s.v are done: s.pv overlays it
#pragma unroll
  for (int h = 0; h < kAttnMaxPerKv; ++h) {
    s.pv[warp][h * kAttnHd + 2 * lane] = acc[h][0];
    s.pv[warp][h * kAttnHd + 2 * lane + 1] = acc[h][1];
  }
  __syncthreads();
  if (t < per_kv * kAttnHd) {
    const int h = t / kAttnHd;
    float o = 0.0f;
    for (int w = 0; w < kSkWarps; ++w) o += s.pv[w][t];
    const float l = h == 0 ? l_run[0] : h == 1 ? l_run[1] : h == 2 ? l_run[2] : l_run[3];
    out[t] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
  }
  __syncthreads();  // s is reused by the next row
}

// One row's attention for the group's q heads (every thread of the block).
// The first chunk's K row (registers), its V rows (cp.async) and q are all
// requested before the first barrier: one round trip to L2, not three.
__device__ __forceinline__ void attend_row(const SkRope& p, int group, int b, AttnSmem& s) {
  const int t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
  const int per_kv = p.n_q_heads / p.n_kv_heads, q_dim = p.n_q_heads * kAttnHd;
  const int ctx = p.context_lens[b];
  const AttnRow r = attn_row(p, group, b);
  const size_t v_off = size_t(r.block_size) * r.kv_dim;
  const size_t q_base = size_t(b) * q_dim + size_t(group) * per_kv * kAttnHd;
  // Key j0 + t's K row into registers (false: no such key).
  auto load_k = [&](int j0, int n, uint4 (&kv)[kAttnHd / 8]) {
    const bf16* kr = t < n ? r.key(j0 + t) : nullptr;
    if (kr) {
#pragma unroll
      for (int c = 0; c < kAttnHd / 8; ++c) kv[c] = ldcg16(kr + c * 8);
    }
    return kr != nullptr;
  };
  // The chunk's V rows into s.v: 8 x 16 B each (missing blocks zero-filled).
  auto issue_v = [&](int j0, int n) {
    for (int i = t; i < n * 8; i += kAttnChunk) {
      const bf16* row = r.key(j0 + i / 8);
      cp_async16(&s.v[i / 8][(i % 8) * 8], row ? row + v_off + (i % 8) * 8 : p.pool, row != nullptr);
    }
    cp_async_commit();
  };
  uint4 kv[kAttnHd / 8];
  bool has_k = load_k(0, min(kAttnChunk, ctx), kv);
  issue_v(0, min(kAttnChunk, ctx));
  s.q[t / kAttnHd][t % kAttnHd] =  // heads beyond per_kv: zeros (their scores are never used)
      t < per_kv * kAttnHd
          ? __bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p.q_out + q_base + t))))
          : 0.0f;
  float m_run[kAttnMaxPerKv], l_run[kAttnMaxPerKv], acc[kAttnMaxPerKv][2];
#pragma unroll
  for (int h = 0; h < kAttnMaxPerKv; ++h) m_run[h] = -INFINITY, l_run[h] = 0.0f, acc[h][0] = acc[h][1] = 0.0f;
  for (int j0 = 0; j0 < ctx; j0 += kAttnChunk) {
    const int n = min(kAttnChunk, ctx - j0);
    if (j0 > 0) has_k = load_k(j0, n, kv);
    __syncthreads();  // s.q written; the previous chunk's s.v / s.p reads done
    if (j0 > 0) issue_v(j0, n);
    float sc[kAttnMaxPerKv];
#pragma unroll
    for (int h = 0; h < kAttnMaxPerKv; ++h) sc[h] = -INFINITY;
    if (has_k) {
      float dot[kAttnMaxPerKv] = {};
#pragma unroll
      for (int c = 0; c < kAttnHd / 8; ++c) {
        float f[8];
        unpack8(kv[c], f);
#pragma unroll
        for (int e = 0; e < 8; ++e)
#pragma unroll
          for (int h = 0; h < kAttnMaxPerKv; ++h) dot[h] += s.q[h][c * 8 + e] * f[e];
      }
#pragma unroll
      for (int h = 0; h < kAttnMaxPerKv; ++h)
        if (h < per_kv) sc[h] = dot[h] * p.attn_scale;
    }
    float alpha[kAttnMaxPerKv];
    chunk_softmax(sc, m_run, alpha, s);
    cp_async_wait<0>();
    __syncthreads();  // s.p, the warp sums and the V rows visible
#pragma unroll
    for (int h = 0; h < kAttnMaxPerKv; ++h) {
      float sum = 0.0f;
      for (int w = 0; w < kSkWarps; ++w) sum += s.red[1][w][h];
      l_run[h] = l_run[h] * alpha[h] + sum;
      acc[h][0] *= alpha[h];
      acc[h][1] *= alpha[h];
    }
#pragma unroll 4
    for (int j = warp; j < n; j += kSkWarps) {
      const float4 pj = s.p[j];
      const float2 v = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&s.v[j][0])[lane]);
      acc[0][0] += pj.x * v.x, acc[0][1] += pj.x * v.y;
      acc[1][0] += pj.y * v.x, acc[1][1] += pj.y * v.y;
      acc[2][0] += pj.z * v.x, acc[2][1] += pj.z * v.y;
      acc[3][0] += pj.w * v.x, acc[3][1] += pj.w * v.y;
    }
  }
  store_row(acc, l_run, per_kv, p.attn_out + q_base, s);
}

// Called by every thread of a block that stored tile rows (every block, or a
// cluster's rank 0) after its stores: the group's last such block runs the
// group's attention for the m rows. `arrivals`: one counter per group, zero
// between launches (the last block resets its group's). Launches are ordered
// as residual_norm_tail's are: a block counts only after its dependency wait.
__device__ __forceinline__ void attn_tail(const SkRope& p, const AttnGroupTile& gt, int m, unsigned int* arrivals,
                                          AttnSmem& s) {
  __threadfence();  // this thread's q / k / v / cache stores are visible device-wide before the block counts
  __syncthreads();
  if (threadIdx.x == 0) {
    s.last = atomicAdd(&arrivals[gt.group], 1u) == unsigned(gt.tiles - 1);
    if (s.last) arrivals[gt.group] = 0;  // every tile of the group has counted
  }
  __syncthreads();
  // Late trigger (the default): the next kernel (o_proj's GEMV) starts streaming
  // its weights once the GEMV part is done -- under the tails, not beside the q/k/v stream.
  if (!(p.attn_flags & kAttnEarlyTrigger)) trigger_dependents();
  if (!s.last) return;
  __threadfence();  // order the reads below after the other blocks' counted stores
  for (int b = 0; b < m; ++b) attend_row(p, gt.group, b, s);
}

}  // namespace lantern::kernels::skinny_detail
