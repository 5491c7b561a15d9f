// gemm variant 7 (mid_stream), gate_up_swiglu variant 3 (mid_fused) and
// proj_residual_norm variant 3's GEMM: a tensor-core GEMM of our own for decode
// batches of 17..128 rows, c[m, n] = a[m, k] @ w[n, k]^T. TESTED ONLY: on the
// H200 it is slower than gemm.6's planned cuBLASLt (docs/performance.md,
// "gemm.7 mid_stream"), so the defaults stay gemm.6 / gate_up_swiglu.2 /
// proj_residual_norm.1 and `--kernels gemm=7,gate_up_swiglu=3,
// proj_residual_norm=3` selects it.
//
// The form measured last:
//  - a block owns 128 weight rows (8 warps x 16; for SwiGLU 64 gate rows and
//    their 64 up rows) and walks its k range in stages of 64 through a 4-deep
//    cp.async ring in shared memory (weights [128][64] and activations
//    [8 NT][64] per stage, rows of 128 B whose 16-byte units are swizzled by
//    the row's parity so a quarter warp's fragment loads hit distinct banks);
//    rows of a past m are zero-filled, not read;
//  - each warp computes its 16 rows x 8 NT batch rows with mma.m16n8k16: 16-byte
//    shared loads give eight consecutive k per lane for both operands (the
//    GEMV's k permutation, gemm_skinny.cu), and the two k halves of a chunk go
//    in separate passes so consecutive mmas feed different accumulators;
//    NT = 4, 8, 16 for m <= 32, 64, 128;
//  - split-k over a thread-block cluster of up to 8 blocks while the grid is
//    under one block per SM (LANTERN_MID_MAX_SPLITS caps it): each block leaves
//    its fp32 partial tile in shared memory and block rank r sums its share of
//    the columns over the ranks in rank order through distributed shared
//    memory (deterministic, no workspace, no atomics);
//  - programmatic dependent launch: the ring's first three weight stages are
//    requested before griddepcontrol.wait.
// Epilogues: bf16 or fp32 c, or SwiGLU over the fused [2 inter, k] weight
// (silu(bf16(g)) * bf16(u), the unfused path's rounding points).
// Where its time goes (Nsight Compute, m = 64): with the mmas and the split
// reduction switched off, the weight ring alone streams qkv in 9.6 us and
// gate_up in 22 us, against 7.5 / 21.7 us for the GEMV at m = 8 and 7-8 / 19.7
// us for cuBLASLt's nvjet kernels at m = 64; the mmas then add 3-8 us (a block
// waits for its stage, then computes it: the ring does not hide the tensor
// work, which at m = 64 is half the weight-stream time at mma.sync's ~2048
// FLOP per cycle per SM). Beating nvjet needs warp specialisation (producer
// warps on TMA, consumer warps on the mmas) or wgmma.
// Fits: 17 <= m <= 128, k % 64 == 0, 16-byte aligned a and w; the callers fall
// back to the GEMV (m <= 16) or gemm.6's planned cuBLASLt otherwise.
#include <cooperative_groups.h>

#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
namespace cg = cooperative_groups;

constexpr int kMidWarps = 8;
constexpr int kMidThreads = kMidWarps * kWarp;
constexpr int kMidRows = kMidWarps * 16;  // weight rows per block
constexpr int kMidKc = 64;                // k per stage: 128-byte rows, 8 16-byte units
constexpr int kMidStages = 4;             // shared-memory ring depth (3 stages in flight)
constexpr int kTileLd = kMidRows + 4;     // partial tile pitch (fp32): 132, conflict-free stores
constexpr int kMidMinM = 17, kMidMaxM = 128;
constexpr int kMidMaxSplits = 8;

enum class MidOut { bf16, f32, swiglu };

// A staged row is 64 bf16 (128 B) with its 16-byte units swizzled by the row's
// parity (unit q of row r at q ^ 4 (r & 1)): the fragment loads of a quarter
// warp (rows r, r + 1, units 4u + t) then hit eight distinct bank groups.
__device__ __forceinline__ int swz(int row, int unit) { return row * 8 + (unit ^ ((row & 1) << 2)); }

template <int NT>
constexpr size_t mid_stage_units() {  // 16-byte units per stage: weights, then activations
  return size_t(kMidRows + 8 * NT) * 8;
}
template <int NT>
constexpr size_t mid_smem_bytes() {
  constexpr size_t ring = kMidStages * mid_stage_units<NT>() * 16;
  constexpr size_t tile = size_t(8) * NT * kTileLd * sizeof(float);
  return ring > tile ? ring : tile;
}

// One thread's share of every stage's cp.async copies: kWPer weight units and
// kAPer activation units at fixed offsets in a stage, sources advancing 128 B
// per stage. `tile_idx` picks the block's 128 weight rows (for SwiGLU 64 gate
// rows, then their 64 up rows); rows past n are clamped here and masked at the
// store, rows of a past m are zero-filled without a read.
template <int NT, bool kSwiglu>
struct MidCopies {
  static constexpr int kWPer = kMidRows * 8 / kMidThreads, kAPer = 8 * NT * 8 / kMidThreads;
  const char* w_src[kWPer];
  const char* a_src[kAPer];
  unsigned w_dst[kWPer], a_dst[kAPer];
  int a_bytes[kAPer];

  __device__ __forceinline__ MidCopies(const bf16* a, const bf16* w, int m, int n, int k, int k0, int tile_idx) {
#pragma unroll
    for (int i = 0; i < kWPer; ++i) {
      const int v = threadIdx.x + i * kMidThreads, r = v / 8, q = v % 8;
      int row;
      if constexpr (kSwiglu) {
        const int j = tile_idx * (kMidRows / 2) + r % (kMidRows / 2);  // output column
        row = (r < kMidRows / 2 ? 0 : n) + min(j, n - 1);
      } else {
        row = min(tile_idx * kMidRows + r, n - 1);
      }
      w_src[i] = reinterpret_cast<const char*>(w + size_t(row) * k + k0 + q * 8);
      w_dst[i] = unsigned(swz(r, q)) * 16;
    }
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const int v = threadIdx.x + i * kMidThreads, r = v / 8, q = v % 8;
      a_src[i] = reinterpret_cast<const char*>(a + size_t(r < m ? r : 0) * k + k0 + q * 8);
      a_dst[i] = unsigned(swz(kMidRows + r, q)) * 16;
      a_bytes[i] = r < m ? 16 : 0;
    }
  }
  // Into the stage at shared address `stage_s`.
  __device__ __forceinline__ void load_w(unsigned stage_s) {
#pragma unroll
    for (int i = 0; i < kWPer; ++i) {
      cp_async16_s(stage_s + w_dst[i], w_src[i], 16);
      w_src[i] += kMidKc * sizeof(bf16);
    }
  }
  __device__ __forceinline__ void load_a(unsigned stage_s) {
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      cp_async16_s(stage_s + a_dst[i], a_src[i], a_bytes[i]);
      a_src[i] += kMidKc * sizeof(bf16);
    }
  }
};

// One warp's mmas over the stage at `stage_s`: rows g (+ 8) of its 16 weight
// rows (`w_lane`) against each 8-row batch tile (`b_lane`); the unit of chunk u
// is 4 (u ^ parity) + t (the swizzle, `off_u`). The two k halves go in separate
// passes, so consecutive mmas feed different accumulators.
template <int NT>
__device__ __forceinline__ void mid_compute(float (&acc)[NT][4], unsigned stage_s, unsigned w_lane,
                                            unsigned b_lane, const unsigned (&off_u)[2]) {
#pragma unroll
  for (int u = 0; u < kMidKc / 32; ++u) {
    const unsigned o = stage_s + off_u[u];
    const uint4 wl = lds128(w_lane + o), wh = lds128(w_lane + o + 8 * 128);
    uint4 b[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) b[j] = lds128(b_lane + o + j * 8 * 128);
#pragma unroll
    for (int j = 0; j < NT; ++j) mma_bf16_16816(acc[j], wl.x, wh.x, wl.y, wh.y, b[j].x, b[j].y);
#pragma unroll
    for (int j = 0; j < NT; ++j) mma_bf16_16816(acc[j], wl.z, wh.z, wl.w, wh.w, b[j].z, b[j].w);
  }
}

// The block's fp32 partial tile [batch][row in block] into shared memory, then
// block rank `split` sums its share of the output columns over the cluster's
// ranks (rank order: deterministic) and stores them, 4 columns per item.
template <int NT, MidOut kOut>
__device__ __forceinline__ void mid_epilogue(const float (&acc)[NT][4], float* tile, void* c, int m, int n,
                                             int tile_idx, int split, int splits) {
  constexpr bool kSwiglu = kOut == MidOut::swiglu;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int rb = warp * 16 + g;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int b0 = 8 * j + 2 * t;
    tile[b0 * kTileLd + rb] = acc[j][0];
    tile[(b0 + 1) * kTileLd + rb] = acc[j][1];
    tile[b0 * kTileLd + rb + 8] = acc[j][2];
    tile[(b0 + 1) * kTileLd + rb + 8] = acc[j][3];
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1)
    cluster.sync();  // every rank's tile is written
  else
    __syncthreads();
  constexpr int kCols = kSwiglu ? kMidRows / 2 : kMidRows;
  const int per_rank = kCols / splits, col_base = split * per_rank;
  const int quads = per_rank / 4;
  for (int item = threadIdx.x; item < m * quads; item += kMidThreads) {
    const int b = item / quads, col = col_base + (item % quads) * 4;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f), u = s;
    for (int r = 0; r < splits; ++r) {
      const float* tp = r == split ? tile : cluster.map_shared_rank(tile, r);
      const float4 v = *reinterpret_cast<const float4*>(tp + b * kTileLd + col);
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
      if constexpr (kSwiglu) {  // the up value of column col sits kCols further
        const float4 q = *reinterpret_cast<const float4*>(tp + b * kTileLd + kCols + col);
        u.x += q.x, u.y += q.y, u.z += q.z, u.w += q.w;
      }
    }
    const float sv[4] = {s.x, s.y, s.z, s.w}, uv[4] = {u.x, u.y, u.z, u.w};
    const int out0 = tile_idx * kCols + col;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (out0 + e >= n) break;
      const size_t at = size_t(b) * n + out0 + e;
      if constexpr (kSwiglu) {
        const float gr = __bfloat162float(__float2bfloat16(sv[e]));
        const float ur = __bfloat162float(__float2bfloat16(uv[e]));
        static_cast<bf16*>(c)[at] = __float2bfloat16(silu_mul(gr, ur));
      } else if constexpr (kOut == MidOut::f32) {
        static_cast<float*>(c)[at] = sv[e];
      } else {
        static_cast<bf16*>(c)[at] = __float2bfloat16(sv[e]);
      }
    }
  }
  if (splits > 1) cluster.sync();  // no block exits while another may read its tile
}

template <int NT, MidOut kOut>
__global__ void __launch_bounds__(kMidThreads, NT <= 8 ? 2 : 1)
    gemm_mid_kernel(const bf16* __restrict__ a,  // [m, k]
                    const bf16* __restrict__ w,  // [n, k] ([2n, k] for swiglu)
                    void* __restrict__ c,        // [m, n]
                    int m, int n, int k, int splits) {
  constexpr unsigned kStageBytes = unsigned(mid_stage_units<NT>()) * 16;
  extern __shared__ __align__(16) unsigned char mid_smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int tile_idx = blockIdx.x / splits, split = blockIdx.x % splits;
  const int k_len = k / splits, k0 = split * k_len;
  const int iters = k_len / kMidKc;
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(mid_smem));
  MidCopies<NT, kOut == MidOut::swiglu> copies(a, w, m, n, k, k0, tile_idx);
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const unsigned par = g & 1;
  const unsigned off_u[2] = {(4 * par + t) * 16, (4 * (1 - par) + t) * 16};
  const unsigned w_lane = ring_s + unsigned(warp * 16 + g) * 128;
  const unsigned b_lane = ring_s + unsigned(kMidRows + g) * 128;

  // Weights do not depend on the previous kernel: the first stages go out before the wait.
#pragma unroll
  for (int s = 0; s < kMidStages - 1; ++s)
    if (s < iters) copies.load_w(ring_s + s * kStageBytes);
  grid_dependency_wait();  // a is written by the previous kernel
  trigger_dependents();
#pragma unroll
  for (int s = 0; s < kMidStages - 1; ++s) {
    if (s < iters) copies.load_a(ring_s + s * kStageBytes);
    cp_async_commit();  // group s: (all early weight stages and) activation stage s
  }
  for (int it = 0; it < iters; ++it) {
    cp_async_wait<kMidStages - 2>();  // stage it has landed (this thread's copies)
    __syncthreads();                  // ... everyone's; and stage it - 1 is no longer read
    if (it + kMidStages - 1 < iters) {
      const unsigned stage_s = ring_s + (it + kMidStages - 1) % kMidStages * kStageBytes;
      copies.load_w(stage_s);
      copies.load_a(stage_s);
    }
    cp_async_commit();
    mid_compute<NT>(acc, (it % kMidStages) * kStageBytes, w_lane, b_lane, off_u);
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is no longer read: the tile reuses it
  mid_epilogue<NT, kOut>(acc, reinterpret_cast<float*>(mid_smem), c, m, n, tile_idx, split, splits);
}

struct MidCall {
  const bf16* a;
  const bf16* w;
  void* c;
  int m, n, k;  // n: output columns
  MidOut out;
};

// LANTERN_MID_MAX_SPLITS (1, 2, 4 or 8; read once): caps the cluster size (an
// experiment knob for docs/performance.md, not a setting).
int mid_max_splits() {
  static const int cap = [] {
    const int v = env_int("LANTERN_MID_MAX_SPLITS", kMidMaxSplits);
    return v == 1 || v == 2 || v == 4 || v == 8 ? v : kMidMaxSplits;
  }();
  return cap;
}

template <int NT, MidOut kOut>
void launch_mid_out(const MidCall& s, const LaunchCtx& ctx, int tiles, int splits) {
  auto kernel = gemm_mid_kernel<NT, kOut>;
  constexpr size_t smem = mid_smem_bytes<NT>();
  static const bool attr_set = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  launch_kernel_cluster(true, unsigned(splits), kernel, dim3(unsigned(tiles) * unsigned(splits)), dim3(kMidThreads),
                        smem, ctx.stream, s.a, s.w, s.c, s.m, s.n, s.k, splits);
  CUDA_CHECK_LAST("gemm_mid_kernel");
}

template <int NT>
void launch_mid(const MidCall& s, const LaunchCtx& ctx, int tiles, int splits) {
  switch (s.out) {
    case MidOut::bf16: return launch_mid_out<NT, MidOut::bf16>(s, ctx, tiles, splits);
    case MidOut::f32: return launch_mid_out<NT, MidOut::f32>(s, ctx, tiles, splits);
    case MidOut::swiglu: return launch_mid_out<NT, MidOut::swiglu>(s, ctx, tiles, splits);
  }
}

// Splits double while the grid is under one block per SM and every split keeps
// whole stages.
void mid_dispatch(const MidCall& s, const LaunchCtx& ctx) {
  const int cols_per_tile = s.out == MidOut::swiglu ? kMidRows / 2 : kMidRows;
  const int tiles = ceil_div(s.n, cols_per_tile);
  int splits = 1;
  while (splits < mid_max_splits() && long(tiles) * splits < sm_count() && s.k % (2 * splits * kMidKc) == 0)
    splits *= 2;
  if (s.m <= 32)
    launch_mid<4>(s, ctx, tiles, splits);
  else if (s.m <= 64)
    launch_mid<8>(s, ctx, tiles, splits);
  else
    launch_mid<16>(s, ctx, tiles, splits);
}

bool mid_fits(const void* a, const void* w, int m, int k) {
  return m >= kMidMinM && m <= kMidMaxM && k % kMidKc == 0 && aligned(a, 16) && aligned(w, 16);
}

}  // namespace

bool gemm_mid_fits(const GemmArgs& a) { return mid_fits(a.a, a.w, a.m, a.k); }

void gemm_mid_launch(const GemmArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(gemm_mid_fits(a), "gemm.mid_stream: shape m=%d k=%d does not fit (17 <= m <= 128, k %% 64 == 0)",
                a.m, a.k);
  mid_dispatch(MidCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.c, a.m, a.n, a.k,
                       a.c_f32 ? MidOut::f32 : MidOut::bf16},
               ctx);
}

bool gate_up_swiglu_mid_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  if (!mid_fits(a.a, a.w, a.m, a.k)) return false;
  mid_dispatch(MidCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.out, a.m, a.inter, a.k,
                       MidOut::swiglu},
               ctx);
  return true;
}

}  // namespace lantern::kernels
