#pragma once
// The skinny GEMV kernel itself (gemv_skinny_kernel, and the residual_norm
// tail it ends with): gemm_skinny.cu, the only includer, instantiates it and
// holds its launchers; that file's header says what the variants change and
// why. The device counters below exist once because one TU includes this.
#include <cooperative_groups.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_skinny_parts.cuh"
#include "kernels/cuda/qkv_attn_tail.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace skinny_detail;
namespace cg = cooperative_groups;

__device__ unsigned int g_tail_arrivals;  // storing blocks of the running launch that are done
constexpr int kSkStreamSlots = 4;  // rope_attn: streams of a device with their own counters (stream_slot.h)
// rope_attn: a group's stored tiles (qkv_attn_tail.cuh), one set per stream slot.
__device__ unsigned int g_attn_arrivals[kSkStreamSlots * kAttnMaxKvHeads];

// Called by every thread of a block that stored rows of y: the last of the
// `storers` such blocks runs the tail over all m rows (one warp per row).
__device__ void residual_norm_tail(const SkTail& t, const bf16* y, int m, int hidden, int storers) {
  __shared__ bool last;
  __threadfence();  // this thread's y stores are visible device-wide before the block counts
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&g_tail_arrivals, 1u) == unsigned(storers - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();  // order the reads of y after the other blocks' counted stores
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int row = warp; row < m; row += kSkWarps) tail_row(t, y, row, hidden, lane);
  if (threadIdx.x == 0) g_tail_arrivals = 0;  // ready for the next launch (graph replays too)
}

// NT mma n-tiles (batch rows 8 * NT); U chunks of 32 k per register group.
// kSingle: the launcher guarantees every warp has at most U chunks, so all of a
// warp's loads form one group, issued at once (no double buffer).
template <int NT, int U, bool kSingle, SkOut kOut, bool kNorm>
__global__ void __launch_bounds__(kSkWarps* kWarp, 2)
    gemv_skinny_kernel(const bf16* __restrict__ a,  // [m, k] (kNorm: x, normalised here)
                       const bf16* __restrict__ w,  // [n, k] ([2n, k] for swiglu)
                       void* __restrict__ c,        // [m, n]
                       int m, int n, int k, int splits, SkTail tail, SkNorm nrm, SkRope rope) {
  __shared__ float4 partial[kSkWarps][kWarp][NT];
  __shared__ float inv_rms[8 * NT];  // kNorm
  extern __shared__ __align__(16) unsigned char sk_dyn[];  // kNorm: x's m rows [m, k]
  bf16* xs = reinterpret_cast<bf16*>(sk_dyn);
  __shared__ float tile_sum[kSkRows][8 * NT];  // this block's partial tile (split-k)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int tile = blockIdx.x / splits, split = blockIdx.x % splits;
  const int k_len = k / splits, k0 = split * k_len;
  constexpr bool kSwiglu = kOut == SkOut::swiglu, kAttn = kOut == SkOut::rope_attn;
  constexpr bool kRope = kOut == SkOut::rope || kAttn;
  // Output rows of this tile: 16, or 8 (gate row j, up row n + j) for swiglu;
  // rope: rope_tile's rotation pairs or 16 v rows.
  const RopeTile rt = kRope ? rope_tile(rope.n_q_heads, rope.n_kv_heads, rope.head_dim, tile) : RopeTile{-1, 0, 0, 0};
  const int row0 = tile * (kSwiglu ? kSkRows / 2 : kSkRows);
  const int r_lo = min(kRope ? rt.lo_row(g) : row0 + g, n - 1),  // tail rows: masked at the store
      r_hi = min(kSwiglu ? n + r_lo : kRope ? rt.hi_row(g) : row0 + g + 8, kSwiglu ? 2 * n - 1 : n - 1);
  // rope: the tile's cos / sin and the rows' cache rows (rope_prepare, after
  // the dependency wait while the weights stream).
  __shared__ float rope_cs[kRope ? 8 : 1][kSkMaxM], rope_sn[kRope ? 8 : 1][kSkMaxM];
  __shared__ long long rope_dst[kRope ? kSkMaxM : 1];
  const bf16* w_lo = w + size_t(r_lo) * k + k0 + t * 8;
  const bf16* w_hi = w + size_t(r_hi) * k + k0 + t * 8;
  const bf16* a_row[NT];
  uint32_t a_mask[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int row = 8 * j + g;
    a_mask[j] = row < m ? 0xffffffffu : 0u;  // rows beyond m feed zeros
    a_row[j] = (kNorm ? xs : a) + size_t(row < m ? row : 0) * k + k0 + t * 8;  // kNorm: from shared memory
  }
  const int chunks = k_len / 32;
  const int mine = warp < chunks ? (chunks - warp + kSkWarps - 1) / kSkWarps : 0;
  const int groups = (mine + U - 1) / U;

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  constexpr int kBufs = kSingle ? 1 : 2;
  uint4 wl[kBufs][U], wh[kBufs][U], av[kBufs][U][NT];
  // kNorm: the norm weight of this block's k range, copied before the wait (it is constant).
  __shared__ uint4 nw_s[kNorm ? kSkNormMaxK / 8 : 1];
  auto offset = [&](int group, int u) { return size_t(warp + (group * U + u) * kSkWarps) * 32; };
  auto load_w = [&](int buf, int group) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (group * U + u < mine) {
        wl[buf][u] = load_stream(w_lo + offset(group, u));
        wh[buf][u] = load_stream(w_hi + offset(group, u));
      }
    }
  };
  auto load_a = [&](int buf, int group) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (group * U + u < mine) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (kNorm)
            av[buf][u][j] = *reinterpret_cast<const uint4*>(a_row[j] + offset(group, u));
          else
            av[buf][u][j] = __ldg(reinterpret_cast<const uint4*>(a_row[j] + offset(group, u)));
        }
      }
    }
  };
  auto compute = [&](int buf, int group) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (group * U + u < mine) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          uint4 x = av[buf][u][j];
          if constexpr (kNorm) x = norm8(x, nw_s[(t * 8 + offset(group, u)) / 8], inv_rms[8 * j + g]);
          x.x &= a_mask[j], x.y &= a_mask[j], x.z &= a_mask[j], x.w &= a_mask[j];
          mma_bf16_16816(acc[j], wl[buf][u].x, wh[buf][u].x, wl[buf][u].y, wh[buf][u].y, x.x, x.y);
          mma_bf16_16816(acc[j], wl[buf][u].z, wh[buf][u].z, wl[buf][u].w, wh[buf][u].w, x.z, x.w);
        }
      }
    }
  };

  // kNorm: the norm weight of the block's k range, in flight (no registers) with
  // the weights; prologue_rows waits for it.
  auto copy_norm_weight = [&] {
    if constexpr (kNorm) {
      for (int v = threadIdx.x; v < k_len / 8; v += kSkWarps * kWarp) cp_async16(&nw_s[v], nrm.weight + k0 + v * 8, true);
      cp_async_commit();
    }
  };
  auto rope_meta = [&] {
    if constexpr (kRope) rope_prepare(rope, rt, m, rope_cs, rope_sn, rope_dst);
  };
  // rope_attn: the tile's kv head group; its blocks prefetch the context's older K/V into L2.
  const AttnGroupTile gt =
      kAttn ? attn_group_tile(rope.n_q_heads, rope.n_kv_heads, rope.head_dim, tile) : AttnGroupTile{0, 0, 1};
  auto after_wait = [&] {
    if (!kAttn || (rope.attn_flags & kAttnEarlyTrigger)) trigger_dependents();  // rope_attn: late (attn_tail)
  };
  // After the first activation loads are issued: the prefetch's two dependent
  // round trips (context lengths, block table) then overlap them.
  auto prefetch_context = [&] {
    if constexpr (kAttn)
      if (rope.attn_flags & kAttnPrefetch) attn_prefetch(rope, gt.group, gt.index * splits + split, gt.tiles * splits, m);
  };
  // Weights do not depend on the previous kernel: start streaming them first.
  if constexpr (kSingle) {
    if (groups > 0) load_w(0, 0);
    copy_norm_weight();
    grid_dependency_wait();  // a (the activations) is written by the previous kernel
    after_wait();
    rope_meta();
    if constexpr (kNorm) prologue_rows(a, xs, m, k, nrm.eps, inv_rms);
    if (groups > 0) load_a(0, 0);
    prefetch_context();
    if (groups > 0) compute(0, 0);
  } else {
    if (groups > 0) load_w(0, 0);
    if (groups > 1) load_w(1, 1);
    copy_norm_weight();
    grid_dependency_wait();
    after_wait();
    rope_meta();
    if constexpr (kNorm) prologue_rows(a, xs, m, k, nrm.eps, inv_rms);
    if (groups > 0) load_a(0, 0);
    if (groups > 1) load_a(1, 1);
    prefetch_context();
    for (int gi = 0; gi < groups; gi += 2) {  // two groups per trip: buffers swap by name
      compute(0, gi);
      if (gi + 2 < groups) {
        load_w(0, gi + 2);
        load_a(0, gi + 2);
      }
      if (gi + 1 < groups) {
        compute(1 % kBufs, gi + 1);
        if (gi + 3 < groups) {
          load_w(1 % kBufs, gi + 3);
          load_a(1 % kBufs, gi + 3);
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < NT; ++j)
    partial[warp][lane][j] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  __syncthreads();
  // One thread per (n-tile, fragment lane, accumulator): sum over the warps.
  // has_item is warp-uniform (NT * 128 items), so the swiglu shuffle below
  // always runs with every lane of the warp.
  const int item = threadIdx.x, r = item % 4;
  const bool has_item = item < NT * kWarp * 4;
  int row_in_tile = 0, batch = 0;
  float sum = 0.0f;
  if (has_item) {
    const int j = item / (kWarp * 4), src_lane = (item / 4) % kWarp;
#pragma unroll
    for (int wi = 0; wi < kSkWarps; ++wi)
      sum += reinterpret_cast<const float*>(&partial[wi][src_lane][j])[r];
    row_in_tile = src_lane / 4 + (r >= 2 ? 8 : 0);
    batch = 8 * j + 2 * (src_lane % 4) + (r & 1);
  }
  auto store = [&](float v) {
    const int row = row0 + row_in_tile;
    if constexpr (kRope) {
      rope_store(rope, rt, static_cast<bf16*>(c), v, r, row_in_tile, batch, m, n, rope_cs, rope_sn, rope_dst);
    } else if constexpr (kSwiglu) {
      // Item r + 2 (two lanes up) holds the up value of this item's gate row.
      const float up = __shfl_down_sync(0xffffffffu, v, 2);
      if (r < 2 && row < n && batch < m) {
        const float gr = __bfloat162float(__float2bfloat16(v)), ur = __bfloat162float(__float2bfloat16(up));
        static_cast<bf16*>(c)[size_t(batch) * n + row] = __float2bfloat16(silu_mul(gr, ur));
      }
    } else if (row < n && batch < m) {
      if constexpr (kOut == SkOut::residual_add) {
        bf16& xe = tail.x[size_t(batch) * n + row];  // x += bf16(v): residual.*'s rounding
        xe = __float2bfloat16(__bfloat162float(xe) + __bfloat162float(__float2bfloat16(v)));
      } else if constexpr (kOut == SkOut::f32)
        static_cast<float*>(c)[size_t(batch) * n + row] = v;
      else
        static_cast<bf16*>(c)[size_t(batch) * n + row] = __float2bfloat16(v);
    }
  };
  constexpr bool kTail = kOut == SkOut::residual_norm;
  // rope_attn: the tail's shared memory, after the prologue norm's rows.
  AttnSmem& attn_s = *reinterpret_cast<AttnSmem*>(sk_dyn + (kNorm ? (size_t(m) * k * sizeof(bf16) + 15) / 16 * 16 : 0));
  if (splits == 1) {
    if (has_item) store(sum);
    if constexpr (kTail) residual_norm_tail(tail, static_cast<const bf16*>(c), m, n, gridDim.x);
    if constexpr (kAttn) attn_tail(rope, gt, m, rope.attn_arrivals, attn_s);
    return;
  }
  // Split-k: rank 0 of the cluster adds the other blocks' tiles (in rank order:
  // deterministic) through distributed shared memory.
  if (has_item) tile_sum[row_in_tile][batch] = sum;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's tile_sum is written
  if (cluster.block_rank() == 0 && has_item) {
    float total = sum;
    for (int rank = 1; rank < splits; ++rank)
      total += cluster.map_shared_rank(&tile_sum[0][0], rank)[row_in_tile * 8 * NT + batch];
    store(total);
  }
  if constexpr (kTail) {
    if (cluster.block_rank() == 0)
      residual_norm_tail(tail, static_cast<const bf16*>(c), m, n, gridDim.x / splits);
  }
  cluster.sync();  // no block exits while rank 0 may still read its shared memory
  if constexpr (kAttn) {
    if (cluster.block_rank() == 0) attn_tail(rope, gt, m, rope.attn_arrivals, attn_s);
  }
}

}  // namespace
}  // namespace lantern::kernels
