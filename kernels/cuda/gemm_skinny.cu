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
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
namespace cg = cooperative_groups;

constexpr int kSkWarps = 8;          // warps per block, splitting the block's k range
constexpr int kSkRows = 16;          // rows of w per tile (the mma's m side)
constexpr int kSkMaxM = 16;          // two mma n-tiles of 8 batch rows
constexpr int kSkMaxSplits = 8;      // blocks per cluster (portable cluster size)
constexpr int kSkDefaultSplits = 2;  // measured: larger clusters cost more than they add

// NT mma n-tiles (batch rows 8 * NT); U chunks of 32 k per register group.
// kSingle: the launcher guarantees every warp has at most U chunks, so all of a
// warp's loads form one group, issued at once (no double buffer).
template <int NT, int U, bool kSingle, bool kOutF32>
__global__ void __launch_bounds__(kSkWarps* kWarp, 2)
    gemv_skinny_kernel(const bf16* __restrict__ a,  // [m, k]
                       const bf16* __restrict__ w,  // [n, k]
                       void* __restrict__ c,        // [m, n]
                       int m, int n, int k, int splits) {
  __shared__ float4 partial[kSkWarps][kWarp][NT];
  __shared__ float tile_sum[kSkRows][8 * NT];  // this block's partial tile (split-k)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int tile = blockIdx.x / splits, split = blockIdx.x % splits;
  const int k_len = k / splits, k0 = split * k_len;
  const int row0 = tile * kSkRows;
  const int r_lo = min(row0 + g, n - 1),
            r_hi = min(row0 + g + 8, n - 1);  // tail rows: masked at the store
  const bf16* w_lo = w + size_t(r_lo) * k + k0 + t * 8;
  const bf16* w_hi = w + size_t(r_hi) * k + k0 + t * 8;
  const bf16* a_row[NT];
  uint32_t a_mask[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int row = 8 * j + g;
    a_mask[j] = row < m ? 0xffffffffu : 0u;  // rows beyond m feed zeros
    a_row[j] = a + size_t(row < m ? row : 0) * k + k0 + t * 8;
  }
  const int chunks = k_len / 32;
  const int mine = warp < chunks ? (chunks - warp + kSkWarps - 1) / kSkWarps : 0;
  const int groups = (mine + U - 1) / U;

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  constexpr int kBufs = kSingle ? 1 : 2;
  uint4 wl[kBufs][U], wh[kBufs][U], av[kBufs][U][NT];
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
        for (int j = 0; j < NT; ++j)
          av[buf][u][j] = __ldg(reinterpret_cast<const uint4*>(a_row[j] + offset(group, u)));
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
          x.x &= a_mask[j], x.y &= a_mask[j], x.z &= a_mask[j], x.w &= a_mask[j];
          mma_bf16_16816(acc[j], wl[buf][u].x, wh[buf][u].x, wl[buf][u].y, wh[buf][u].y, x.x, x.y);
          mma_bf16_16816(acc[j], wl[buf][u].z, wh[buf][u].z, wl[buf][u].w, wh[buf][u].w, x.z, x.w);
        }
      }
    }
  };

  // Weights do not depend on the previous kernel: start streaming them first.
  if constexpr (kSingle) {
    if (groups > 0) load_w(0, 0);
    grid_dependency_wait();  // a (the activations) is written by the previous kernel
    trigger_dependents();
    if (groups > 0) {
      load_a(0, 0);
      compute(0, 0);
    }
  } else {
    if (groups > 0) load_w(0, 0);
    if (groups > 1) load_w(1, 1);
    grid_dependency_wait();
    trigger_dependents();
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
  const int item = threadIdx.x;
  const bool has_item = item < NT * kWarp * 4;
  int row_in_tile = 0, batch = 0;
  float sum = 0.0f;
  if (has_item) {
    const int j = item / (kWarp * 4), src_lane = (item / 4) % kWarp, r = item % 4;
#pragma unroll
    for (int wi = 0; wi < kSkWarps; ++wi)
      sum += reinterpret_cast<const float*>(&partial[wi][src_lane][j])[r];
    row_in_tile = src_lane / 4 + (r >= 2 ? 8 : 0);
    batch = 8 * j + 2 * (src_lane % 4) + (r & 1);
  }
  auto store = [&](float v) {
    const int row = row0 + row_in_tile;
    if (row < n && batch < m) {
      if constexpr (kOutF32)
        static_cast<float*>(c)[size_t(batch) * n + row] = v;
      else
        static_cast<bf16*>(c)[size_t(batch) * n + row] = __float2bfloat16(v);
    }
  };
  if (splits == 1) {
    if (has_item) store(sum);
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
  cluster.sync();  // no block exits while rank 0 may still read its shared memory
}

template <int NT, int U, bool kSingle>
void launch_skinny(const GemmArgs& a, const LaunchCtx& ctx, int tiles, int splits, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(tiles) * unsigned(splits));
  cfg.blockDim = dim3(kSkWarps * kWarp);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = ctx.stream;
  cudaLaunchAttribute attrs[2];
  int n_attrs = 0;
  if (pdl) {
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  if (splits > 1) {
    attrs[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[n_attrs].val.clusterDim.x = unsigned(splits);
    attrs[n_attrs].val.clusterDim.y = 1;
    attrs[n_attrs].val.clusterDim.z = 1;
    ++n_attrs;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  const auto* ap = static_cast<const bf16*>(a.a);
  const auto* wp = static_cast<const bf16*>(a.w);
  if (a.c_f32)
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_skinny_kernel<NT, U, kSingle, true>, ap, wp, a.c, a.m,
                                  a.n, a.k, splits));
  else
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_skinny_kernel<NT, U, kSingle, false>, ap, wp, a.c, a.m,
                                  a.n, a.k, splits));
  CUDA_CHECK_LAST("gemv_skinny_kernel");
}

// Split count: double while the grid is smaller than the SM count and each
// block keeps at least 256 k (one 32-wide chunk per warp).
// LANTERN_GEMV_MAX_SPLITS (1, 2, 4 or 8; read once) caps the cluster size: an
// experiment knob for docs/performance.md's measurements, not a setting.
int max_splits() {
  static const int cap = [] {
    const char* env = std::getenv("LANTERN_GEMV_MAX_SPLITS");
    const int v = env ? std::atoi(env) : kSkDefaultSplits;
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

}  // namespace

bool gemm_skinny_fits(const GemmArgs& a) {
  return a.m <= kSkMaxM && a.k % 32 == 0 && aligned(a.a, 16) && aligned(a.w, 16);
}

void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl) {
  const char* who = pdl ? "gemm.gemv_pdl" : "gemm.gemv_split";
  LANTERN_CHECK(a.m >= 0 && a.n > 0 && a.k > 0, "%s: bad shape m=%d n=%d k=%d", who, a.m, a.n, a.k);
  if (a.m == 0) return;
  if (!gemm_skinny_fits(a)) return gemm_cublas_launch(a, ctx);
  const int tiles = ceil_div(a.n, kSkRows);
  const int splits = gemm_skinny_splits(a.n, a.k, sm_count());
  // Chunks of 32 k per warp: up to 8 (m <= 8) or 4 (m <= 16) go out as one group.
  const int per_warp = ceil_div(ceil_div(a.k / splits, 32), kSkWarps);
  const bool single = single_group_allowed();
  if (a.m <= 8) {
    if (single && per_warp <= 8)
      launch_skinny<1, 8, true>(a, ctx, tiles, splits, pdl);
    else
      launch_skinny<1, 3, false>(a, ctx, tiles, splits, pdl);
  } else {
    if (single && per_warp <= 4)
      launch_skinny<2, 4, true>(a, ctx, tiles, splits, pdl);
    else
      launch_skinny<2, 2, false>(a, ctx, tiles, splits, pdl);
  }
}

}  // namespace lantern::kernels
