// gemm variants 4 (gemv_split) and 5 (gemv_pdl): the decode GEMV, c[m, n] =
// a[m, k] @ w[n, k]^T for m <= 16, bandwidth-bound on w.
//
// Variant 2 (gemv_mma) reached 92 % of copy bandwidth on the LM head but only
// 50-54 % on the per-layer matrices and 9 % on k/v_proj: with 16 rows per block,
// n = 512 is 32 blocks on 132 SMs, and n = 2048 is 128 blocks whose loads ramp up
// and drain once. Changes here:
//  - split-k across a thread-block cluster: the `splits` blocks of a cluster share
//    one 16-row tile and take k / splits each; their partial tiles are summed
//    through distributed shared memory by the cluster's rank 0 (no workspace, no
//    atomics, deterministic). splits doubles while the grid is smaller than the
//    SM count, up to 2 by default (q/o/down 128 tiles x 2, k/v 32 x 2): clusters
//    of 8 measured slower in a graph-replayed decode chain (the cluster barrier
//    and co-scheduling cost more than the extra blocks bring);
//  - when a warp has at most 8 chunks of 32 k (4 above m = 8) every load it will
//    make goes out at once as one group; otherwise two register groups are
//    double-buffered (partial groups predicated, not a serial tail);
//  - m up to 16: two mma n-tiles (batch rows 0-7 and 8-15);
//  - variant 5 only: programmatic dependent launch. The weight loads (constant
//    data) are issued BEFORE griddepcontrol.wait, so they overlap the previous
//    kernel's tail and this kernel's launch; the activation loads come after it.
//    The kernel then triggers its own dependents, so a following GEMV (k after q,
//    v after k, up after gate) starts streaming its weights while this one
//    finishes. Kernels that precede GEMVs (rmsnorm.2, swiglu.1, attention_decode
//    2/3) trigger early too; a PDL-launched kernel still waits for the full
//    completion of its predecessor before reading activations.
// Both fall back to cuBLAS (variant 1) for m > 16, k % 32 != 0 or unaligned
// pointers, so one variant serves every batch. Variant 6 (gemm.cu) runs variant
// 5 where it fits and planned cuBLASLt (gemm_lt.cpp) elsewhere.
//
// gate_up_swiglu.2 (gemv_fused) runs the same kernel with a SwiGLU epilogue
// (SkOut::swiglu): a 16-row tile is 8 gate rows j..j+7 (the mma's rows 0-7)
// and the matching 8 up rows inter + j.. (rows 8-15), so a fragment lane's
// accumulators c0/c1 hold gate and c2/c3 the up value of the same (row, batch)
// -- in the cross-warp reduction they are items r and r + 2, two lanes apart
// in one warp: a shuffle pairs them and the epilogue writes silu(g) * u for
// rows j..j+7 directly. g and u are rounded to bf16 first (what swiglu reads in
// the unfused path), and each row's fp32 sum is the unfused GEMV's (same k
// split, same order), so the output is bit-identical when the split count is.
//
// proj_residual_norm.2 (gemv_fused) runs it with a residual + RMSNorm tail
// (SkOut::residual_norm): the blocks that store output rows (every block, or
// a cluster's rank 0) store y as the plain GEMV does, fence, and count
// themselves on a device counter; the last of them adds y into the residual
// stream x and normalises it (add_rmsnorm.1's arithmetic and element order:
// one warp per row, the lane's 16-byte vectors idx = c * 32 + lane, so the
// result is bit-identical to gemm.5 + add_rmsnorm.1) and resets the counter.
// That saves the separate add_rmsnorm launch and its kernel boundary. The
// counter is one per device: launches of the fused kernel are ordered (each
// counts only after griddepcontrol.wait, i.e. after its predecessor grid --
// and so every earlier kernel of the PDL chain -- completed).
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/gemm_skinny_parts.cuh"
#include "kernels/cuda/qkv_attn_tail.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace skinny_detail;
namespace cg = cooperative_groups;

__device__ unsigned int g_tail_arrivals;  // storing blocks of the running launch that are done
__device__ unsigned int g_attn_arrivals[kAttnMaxKvHeads];  // rope_attn: a group's stored tiles (qkv_attn_tail.cuh)

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
    if (groups > 0) {
      load_a(0, 0);
      compute(0, 0);
    }
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
    if constexpr (kAttn) attn_tail(rope, gt, m, g_attn_arrivals, attn_s);
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
    if (cluster.block_rank() == 0) attn_tail(rope, gt, m, g_attn_arrivals, attn_s);
  }
}

// One skinny-GEMV launch: c = a @ w^T, or the swiglu epilogue (w: 2n rows).
struct SkinnyCall {
  const bf16* a;
  const bf16* w;
  void* c;
  int m, n, k;  // n: output columns
  SkOut out;
  SkTail tail = {};  // residual_norm, residual_add (x) only
  SkNorm norm = {};  // norm.weight set: the prologue norm (a is x)
  SkRope rope = {};  // rope only
};

template <int NT, int U, bool kSingle, SkOut kOut>
void launch_skinny_out(const SkinnyCall& s, const LaunchCtx& ctx, int tiles, int splits, bool pdl) {
  // kNorm: x's m rows in dynamic shared memory; rope_attn: then the tail's (16-byte aligned).
  size_t dyn = s.norm.weight ? size_t(s.m) * s.k * sizeof(bf16) : 0;
  if (kOut == SkOut::rope_attn) dyn = (dyn + 15) / 16 * 16 + sizeof(AttnSmem);
  auto go = [&](auto kernel) {
    if (dyn > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dyn)));
    launch_kernel_cluster(pdl, unsigned(splits), kernel, dim3(unsigned(tiles) * unsigned(splits)),
                          dim3(kSkWarps * kWarp), dyn, ctx.stream, s.a, s.w, s.c, s.m, s.n, s.k, splits, s.tail,
                          s.norm, s.rope);
  };
  if (s.norm.weight)
    go(gemv_skinny_kernel<NT, U, kSingle, kOut, true>);
  else
    go(gemv_skinny_kernel<NT, U, kSingle, kOut, false>);
}

template <int NT, int U, bool kSingle>
void launch_skinny(const SkinnyCall& s, const LaunchCtx& ctx, int tiles, int splits, bool pdl) {
  switch (s.out) {
    case SkOut::bf16: launch_skinny_out<NT, U, kSingle, SkOut::bf16>(s, ctx, tiles, splits, pdl); break;
    case SkOut::f32: launch_skinny_out<NT, U, kSingle, SkOut::f32>(s, ctx, tiles, splits, pdl); break;
    case SkOut::swiglu: launch_skinny_out<NT, U, kSingle, SkOut::swiglu>(s, ctx, tiles, splits, pdl); break;
    case SkOut::residual_norm:
      launch_skinny_out<NT, U, kSingle, SkOut::residual_norm>(s, ctx, tiles, splits, pdl);
      break;
    case SkOut::residual_add:
      launch_skinny_out<NT, U, kSingle, SkOut::residual_add>(s, ctx, tiles, splits, pdl);
      break;
    case SkOut::rope: launch_skinny_out<NT, U, kSingle, SkOut::rope>(s, ctx, tiles, splits, pdl); break;
    case SkOut::rope_attn: launch_skinny_out<NT, U, kSingle, SkOut::rope_attn>(s, ctx, tiles, splits, pdl); break;
  }
  CUDA_CHECK_LAST("gemv_skinny_kernel");
}

// Split count: double while the grid is smaller than the SM count and each
// block keeps at least 256 k (one 32-wide chunk per warp).
// LANTERN_GEMV_MAX_SPLITS (1, 2, 4 or 8; read once) caps the cluster size: an
// experiment knob for docs/performance.md's measurements, not a setting.
int max_splits() {
  static const int cap = [] {
    const int v = env_int("LANTERN_GEMV_MAX_SPLITS", kSkDefaultSplits);
    return (v == 1 || v == 2 || v == 4 || v == 8) && v <= kSkMaxSplits ? v : kSkDefaultSplits;
  }();
  return cap;
}

// LANTERN_GEMV_SINGLE=0 (read once) turns off the one-group path (experiment knob).
bool single_group_allowed() {
  static const bool on = [] {
    const char* env = std::getenv("LANTERN_GEMV_SINGLE");
    return !(env && env[0] == '0');
  }();
  return on;
}

int gemm_skinny_splits(int n, int k, int sms) {
  const int tiles = ceil_div(n, kSkRows);
  int splits = 1;
  while (splits < max_splits() && long(tiles) * splits < sms &&
         k % (2 * splits * 32 * kSkWarps) == 0)
    splits *= 2;
  return splits;
}

// Launches s (m <= 16, k % 32 == 0, 16-byte aligned a and w) over `rows`
// weight rows: the split count and the register-group shape by k and m.
void skinny_dispatch(const SkinnyCall& s, int rows, const LaunchCtx& ctx, bool pdl) {
  const int tiles = ceil_div(rows, kSkRows);
  const int splits = gemm_skinny_splits(rows, s.k, sm_count());
  // Chunks of 32 k per warp: up to 8 (m <= 8) or 4 (m <= 16) go out as one group.
  const int per_warp = ceil_div(ceil_div(s.k / splits, 32), kSkWarps);
  const bool single = single_group_allowed();
  if (s.m <= 8) {
    if (single && per_warp <= 8)
      launch_skinny<1, 8, true>(s, ctx, tiles, splits, pdl);
    else
      launch_skinny<1, 3, false>(s, ctx, tiles, splits, pdl);
  } else {
    if (single && per_warp <= 4)
      launch_skinny<2, 4, true>(s, ctx, tiles, splits, pdl);
    else
      launch_skinny<2, 2, false>(s, ctx, tiles, splits, pdl);
  }
}

bool skinny_fits(const void* a, const void* w, int m, int k) {
  return m <= kSkMaxM && k % 32 == 0 && aligned(a, 16) && aligned(w, 16);
}

// The prologue norm as the kernel takes it (nullptr weight: none); false when
// the norm is set but its weight is not 16-byte aligned or a block's k range
// (k / splits over `rows` weight rows) exceeds the shared copy of the weight.
bool skinny_norm(const PrologueNorm& p, int rows, int m, int k, SkNorm& out) {
  out = SkNorm{static_cast<const bf16*>(p.weight), p.eps};
  return p.weight == nullptr || (aligned(p.weight, 16) && size_t(m) * k * sizeof(bf16) <= kSkNormMaxRowBytes &&
                                 k / gemm_skinny_splits(rows, k, sm_count()) <= kSkNormMaxK);
}

}  // namespace

bool gemm_skinny_fits(const GemmArgs& a) {
  SkNorm n;
  return skinny_fits(a.a, a.w, a.m, a.k) && skinny_norm(a.norm, a.n, a.m, a.k, n);
}

void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl) {
  const char* who = pdl ? "gemm.gemv_pdl" : "gemm.gemv_split";
  LANTERN_CHECK(a.m >= 0 && a.n > 0 && a.k > 0, "%s: bad shape m=%d n=%d k=%d", who, a.m, a.n, a.k);
  if (a.m == 0) return;
  if (!gemm_skinny_fits(a)) return gemm_cublas_launch(with_norm_applied(a, ctx), ctx);
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.c, a.m, a.n, a.k,
               a.c_f32 ? SkOut::f32 : SkOut::bf16};
  skinny_norm(a.norm, a.n, a.m, a.k, s.norm);
  skinny_dispatch(s, a.n, ctx, pdl);
}

bool gate_up_swiglu_skinny_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.out, a.m, a.inter, a.k,
               SkOut::swiglu};
  if (!skinny_fits(a.a, a.w, a.m, a.k) || !skinny_norm(a.norm, 2 * a.inter, a.m, a.k, s.norm)) return false;
  skinny_dispatch(s, 2 * a.inter, ctx, /*pdl=*/true);
  return true;
}

bool proj_residual_norm_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  const int vecs = a.hidden / 8;
  const bool tail_fits = a.hidden % 8 == 0 && vecs <= kTailVecs * kWarp && aligned(a.x, 16) &&
                         aligned(a.y, 16) && aligned(a.norm_weight, 16) && aligned(a.out, 16);
  if (a.out == nullptr || !tail_fits || !skinny_fits(a.a, a.w, a.m, a.k)) return false;
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.y, a.m, a.hidden, a.k,
               SkOut::residual_norm};
  s.tail = SkTail{static_cast<bf16*>(a.x), static_cast<const bf16*>(a.norm_weight), static_cast<bf16*>(a.out),
                  a.eps};
  skinny_dispatch(s, a.hidden, ctx, /*pdl=*/true);
  return true;
}

namespace {

// The rope epilogue's call for a (false: the shape or pointers do not fit).
bool qkv_rope_call(const QkvRopeArgs& a, SkOut out, SkinnyCall& s) {
  const KvCacheRef& kv = a.cache;
  const int hd = kv.head_dim, rows = a.cols();
  const bool shape_fits = hd > 0 && hd % 16 == 0 && a.n_q_heads > 0 && kv.n_kv_heads > 0 && kv.block_size > 0 &&
                          kv.max_blocks_per_seq > 0 && (kv.n_kv_heads * hd) % kSkRows == 0;
  s = SkinnyCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.qkv, a.m, rows, a.k, out};
  if (!shape_fits || !skinny_fits(a.a, a.w, a.m, a.k) || !skinny_norm(a.norm, rows, a.m, a.k, s.norm)) return false;
  s.rope = SkRope{static_cast<bf16*>(a.q_out), a.positions, a.seq_slots, a.inv_freq, static_cast<bf16*>(kv.pool),
                  kv.block_tables, kv.block_size, kv.max_blocks_per_seq, a.n_q_heads, kv.n_kv_heads, hd};
  return true;
}

// rope_attn's flags: LANTERN_QKV_ATTN_PREFETCH=0 drops the L2 prefetch of the
// context's K/V, LANTERN_QKV_ATTN_EARLY_TRIGGER=1 lets the next kernel launch
// right after the dependency wait (as the other epilogues do) -- experiment
// knobs for docs/performance.md's A/Bs, read once.
int attn_flags() {
  static const int flags = (env_int("LANTERN_QKV_ATTN_PREFETCH", 1) ? kAttnPrefetch : 0) |
                           (env_int("LANTERN_QKV_ATTN_EARLY_TRIGGER", 0) ? kAttnEarlyTrigger : 0);
  return flags;
}
// The most rows the tail takes (it runs them one after another in one block
// per kv head): LANTERN_QKV_ATTN_MAX_ROWS=1..8 (default 8), read once; more
// rows run the composed form.
int attn_max_rows() {
  static const int rows = std::clamp(env_int("LANTERN_QKV_ATTN_MAX_ROWS", kAttnMaxRows), 1, kAttnMaxRows);
  return rows;
}

}  // namespace

bool qkv_rope_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  SkinnyCall s;
  if (!qkv_rope_call(a, SkOut::rope, s)) return false;
  skinny_dispatch(s, a.cols(), ctx, /*pdl=*/true);
  return true;
}

bool qkv_rope_attention_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  const QkvAttention& at = a.attention;
  const KvCacheRef& kv = a.cache;
  const bool attn_fits = at.out != nullptr && at.context_lens != nullptr && kv.head_dim == kAttnHd &&
                         kv.n_kv_heads > 0 && kv.n_kv_heads <= kAttnMaxKvHeads && a.n_q_heads % kv.n_kv_heads == 0 &&
                         a.n_q_heads / kv.n_kv_heads <= kAttnMaxPerKv && a.m <= attn_max_rows() &&
                         aligned(kv.pool, 16);
  SkinnyCall s;
  if (!attn_fits || !qkv_rope_call(a, SkOut::rope_attn, s)) return false;
  s.rope.attn_out = static_cast<bf16*>(at.out);
  s.rope.context_lens = at.context_lens;
  s.rope.attn_scale = at.scale;
  s.rope.attn_flags = attn_flags();
  skinny_dispatch(s, a.cols(), ctx, /*pdl=*/true);
  return true;
}


bool proj_residual_add_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  if (a.out != nullptr || !skinny_fits(a.a, a.w, a.m, a.k)) return false;
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), nullptr, a.m, a.hidden, a.k,
               SkOut::residual_add};
  s.tail.x = static_cast<bf16*>(a.x);
  skinny_dispatch(s, a.hidden, ctx, /*pdl=*/true);
  return true;
}

}  // namespace lantern::kernels
