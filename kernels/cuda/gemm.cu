// gemm: c[m, n] = a[m, k] @ w[n, k]^T (w in HF layout), bf16 operands, fp32
// accumulation, c bf16 or fp32 (logits).
//
// Variant 1 (seed): cublasGemmEx, row-major through the transpose trick: the
//   column-major product C^T[n, m] = W[n, k] . A^T[k, m], i.e. op(W) = T,
//   op(A) = N, leading dimensions k, k and n. Status checked.
// Variant 2 (gemv_mma): decode-sized m (<= 8): a bandwidth-bound kernel that
//   streams w exactly once with 16-byte loads straight into tensor-core
//   fragments (mma.m16n8k16; the batch is the n=8 side, w rows the m=16 side).
//   Both operands load 8 consecutive k per lane, which is a fixed permutation
//   of k shared by A and B fragments (a dot product is order-free). A block
//   owns 16 rows of w; its 8 warps split k and reduce through shared memory.
//   Above m = 8, or for k % 32 != 0 / unaligned pointers, it calls variant 1.
// Variant 3 (gemv_stream): variant 2's fragments in a persistent kernel (one
//   16-warp block per SM walking the row tiles, the register double buffer
//   running across tiles); k % 2048 == 0, else variant 2. Measured slower than
//   variant 2 (the per-tile block barrier drains the only block's pipeline), so
//   it is not the default; kept as the recorded experiment.
// Variants 4 (gemv_split) and 5 (gemv_pdl): kernels/cuda/gemm_skinny.cu.
// Variant 6 (lt_planned): variant 5 for m <= 16, cublasLtMatmul with a measured
//   per-shape algorithm above (kernels/cuda/gemm_lt.cpp).
// Variant 7 (mid_stream, tested only: slower than variant 6 on the H200):
//   variant 5 for m <= 16, the batch kernel of kernels/cuda/gemm_mid.cu for
//   17 <= m <= 128, variant 6's cuBLASLt above.
// Variant 8 (wgmma_split, tested only: slower than variant 6 on the H200,
//   docs/performance.md "Session 20-21"): variant 5 for m <= 16,
//   the wgmma kernel of kernels/cuda/sm90a/gemm_wgmma.cu for 17 <= m <= 128
//   with bf16 out on an sm_90 GPU, variant 6's cuBLASLt elsewhere.
#include <algorithm>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

void check_gemm(const GemmArgs& a, const char* who) {
  LANTERN_CHECK(a.m >= 0 && a.n > 0 && a.k > 0, "%s: bad shape m=%d n=%d k=%d", who, a.m, a.n, a.k);
  // kernels::launch runs a prologue norm ahead of the variants without it.
  LANTERN_ASSERT(a.norm.weight == nullptr, "%s: a prologue norm reached a kernel that ignores it", who);
}

// ------------------------------------------------------------------ variant 1
void gemm_cublas(const GemmArgs& a, const LaunchCtx& ctx) {
  check_gemm(a, "gemm.seed");
  LANTERN_CHECK(ctx.cublas != nullptr, "gemm.seed: LaunchCtx has no cuBLAS handle");
  if (a.m == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
  CUBLAS_CHECK(cublasSetPointerMode(ctx.cublas, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, a.n, a.m, a.k, &alpha, a.w,
                            CUDA_R_16BF, a.k, a.a, CUDA_R_16BF, a.k, &beta, a.c,
                            a.c_f32 ? CUDA_R_32F : CUDA_R_16BF, a.n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

// ------------------------------------------------------------------ variant 2
constexpr int kGemvMaxM = 8;    // the mma's n side
constexpr int kGemvWarps = 8;   // split k inside a block
constexpr int kGemvUnroll = 4;  // 32-wide k chunks per register buffer (two buffers)
constexpr int kGemvRows = 16;   // rows of w per block (the mma's m side)

template <bool kOutF32>
__global__ void __launch_bounds__(kGemvWarps * kWarp)
    gemv_mma_kernel(const bf16* __restrict__ a,  // [m, k]
                    const bf16* __restrict__ w,  // [n, k]
                    void* __restrict__ c,        // [m, n]
                    int m, int n, int k) {
  __shared__ float4 partial[kGemvWarps][kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kGemvRows;
  const int r_lo = min(row0 + g, n - 1), r_hi = min(row0 + g + 8, n - 1);  // tail rows: masked
  const bf16* w_lo = w + size_t(r_lo) * k + t * 8;
  const bf16* w_hi = w + size_t(r_hi) * k + t * 8;
  // Rows of a beyond m feed zeros (the load still reads row 0: no branch).
  const uint32_t a_mask = g < m ? 0xffffffffu : 0u;
  const bf16* a_row = a + size_t(g < m ? g : 0) * k + t * 8;
  const int chunks = k / 32;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto mma_chunk = [&](const uint4& wl, const uint4& wh, uint4 av) {
    av.x &= a_mask;
    av.y &= a_mask;
    av.z &= a_mask;
    av.w &= a_mask;
    mma_bf16_16816(acc, wl.x, wh.x, wl.y, wh.y, av.x, av.y);
    mma_bf16_16816(acc, wl.z, wh.z, wl.w, wh.w, av.z, av.w);
  };
  // This warp's chunks are warp, warp + W, ...; groups of kGemvUnroll are
  // double-buffered in registers: the next group's loads are issued before the
  // current group's mmas, so 2 x kGemvUnroll chunks are in flight per lane.
  const int mine = warp < chunks ? (chunks - warp + kGemvWarps - 1) / kGemvWarps : 0;
  const int groups = mine / kGemvUnroll;
  uint4 wl[2][kGemvUnroll], wh[2][kGemvUnroll], av[2][kGemvUnroll];
  auto load_group = [&](int buf, int group) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const size_t off = size_t(warp + (group * kGemvUnroll + u) * kGemvWarps) * 32;
      wl[buf][u] = load_stream(w_lo + off);
      wh[buf][u] = load_stream(w_hi + off);
      av[buf][u] = __ldg(reinterpret_cast<const uint4*>(a_row + off));
    }
  };
  if (groups > 0) load_group(0, 0);
  int gi = 0;
  for (; gi + 2 <= groups; gi += 2) {  // unrolled by two: buffers swap by name, no moves
    if (gi + 1 < groups) load_group(1, gi + 1);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) mma_chunk(wl[0][u], wh[0][u], av[0][u]);
    if (gi + 2 < groups) load_group(0, gi + 2);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) mma_chunk(wl[1][u], wh[1][u], av[1][u]);
  }
  if (gi < groups) {  // odd count: the last group sits in buffer 0
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) mma_chunk(wl[0][u], wh[0][u], av[0][u]);
  }
  for (int c = groups * kGemvUnroll; c < mine; ++c) {  // tail: one chunk at a time
    const size_t off = size_t(warp + c * kGemvWarps) * 32;
    mma_chunk(load_stream(w_lo + off), load_stream(w_hi + off),
              __ldg(reinterpret_cast<const uint4*>(a_row + off)));
  }
  partial[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (threadIdx.x < kWarp * 4) {
    const int src_lane = threadIdx.x / 4, r = threadIdx.x % 4;
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kGemvWarps; ++wi) sum += reinterpret_cast<const float*>(&partial[wi][src_lane])[r];
    const int row = row0 + src_lane / 4 + (r >= 2 ? 8 : 0);
    const int batch = 2 * (src_lane % 4) + (r & 1);
    if (row < n && batch < m) {
      if constexpr (kOutF32)
        static_cast<float*>(c)[size_t(batch) * n + row] = sum;
      else
        static_cast<bf16*>(c)[size_t(batch) * n + row] = __float2bfloat16(sum);
    }
  }
}

void gemm_gemv_mma(const GemmArgs& a, const LaunchCtx& ctx) {
  check_gemm(a, "gemm.gemv_mma");
  if (a.m == 0) return;
  const bool fits = a.m <= kGemvMaxM && a.k % 32 == 0 && aligned(a.a, 16) && aligned(a.w, 16);
  if (!fits) return gemm_cublas(a, ctx);
  const int blocks = ceil_div(a.n, kGemvRows);
  const auto* ap = static_cast<const bf16*>(a.a);
  const auto* wp = static_cast<const bf16*>(a.w);
  if (a.c_f32)
    gemv_mma_kernel<true><<<blocks, kGemvWarps * kWarp, 0, ctx.stream>>>(ap, wp, a.c, a.m, a.n, a.k);
  else
    gemv_mma_kernel<false><<<blocks, kGemvWarps * kWarp, 0, ctx.stream>>>(ap, wp, a.c, a.m, a.n, a.k);
  CUDA_CHECK_LAST("gemv_mma_kernel");
}

// ------------------------------------------------------------------ variant 3
// Persistent streaming GEMV: one 16-warp block per multiprocessor walks the row
// tiles blockIdx.x, blockIdx.x + gridDim.x, ...; each warp owns k chunks
// warp, warp + 16, ... of every tile, and the register double buffer runs
// across tile boundaries, so the next tile's loads are in flight while this
// tile is reduced and stored: no per-block ramp-up, no wave tail.
constexpr int kStreamWarps = 16;
constexpr int kStreamUnroll = 4;
constexpr int kStreamKMultiple = kStreamWarps * kStreamUnroll * 32;  // k per group round

template <bool kOutF32>
__global__ void __launch_bounds__(kStreamWarps * kWarp, 1)
    gemv_stream_kernel(const bf16* __restrict__ a, const bf16* __restrict__ w,
                       void* __restrict__ c, int m, int n, int k) {
  __shared__ float4 partial[kStreamWarps][kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const uint32_t a_mask = g < m ? 0xffffffffu : 0u;
  const bf16* a_row = a + size_t(g < m ? g : 0) * k + t * 8;
  const int tiles = (n + kGemvRows - 1) / kGemvRows;
  const int my_tiles = blockIdx.x < tiles ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int groups = k / kStreamKMultiple;  // per tile and warp
  const int items = my_tiles * groups;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint4 wl[2][kStreamUnroll], wh[2][kStreamUnroll], av[2][kStreamUnroll];
  auto load_item = [&](int buf, int item) {
    const int tile = blockIdx.x + (item / groups) * gridDim.x, grp = item % groups;
    const int r_lo = min(tile * kGemvRows + g, n - 1), r_hi = min(tile * kGemvRows + g + 8, n - 1);
    const bf16* w_lo = w + size_t(r_lo) * k + t * 8;
    const bf16* w_hi = w + size_t(r_hi) * k + t * 8;
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const size_t off = size_t(warp + (grp * kStreamUnroll + u) * kStreamWarps) * 32;
      wl[buf][u] = load_stream(w_lo + off);
      wh[buf][u] = load_stream(w_hi + off);
      av[buf][u] = __ldg(reinterpret_cast<const uint4*>(a_row + off));
    }
  };
  auto compute_item = [&](int buf) {
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      uint4 x = av[buf][u];
      x.x &= a_mask, x.y &= a_mask, x.z &= a_mask, x.w &= a_mask;
      mma_bf16_16816(acc, wl[buf][u].x, wh[buf][u].x, wl[buf][u].y, wh[buf][u].y, x.x, x.y);
      mma_bf16_16816(acc, wl[buf][u].z, wh[buf][u].z, wl[buf][u].w, wh[buf][u].w, x.z, x.w);
    }
  };
  // After a tile's last group: sum the warps' fragments and store 16 x m outputs.
  auto finish_tile = [&](int item) {
    const int tile = blockIdx.x + (item / groups) * gridDim.x;
    partial[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    __syncthreads();
    if (threadIdx.x < kWarp * 4) {
      const int src_lane = threadIdx.x / 4, r = threadIdx.x % 4;
      float sum = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kStreamWarps; ++wi)
        sum += reinterpret_cast<const float*>(&partial[wi][src_lane])[r];
      const int row = tile * kGemvRows + src_lane / 4 + (r >= 2 ? 8 : 0);
      const int batch = 2 * (src_lane % 4) + (r & 1);
      if (row < n && batch < m) {
        if constexpr (kOutF32)
          static_cast<float*>(c)[size_t(batch) * n + row] = sum;
        else
          static_cast<bf16*>(c)[size_t(batch) * n + row] = __float2bfloat16(sum);
      }
    }
    __syncthreads();  // partial is rewritten by the next tile
  };
  if (items > 0) load_item(0, 0);
  for (int it = 0; it < items; it += 2) {  // two items per trip: buffers swap by name
    if (it + 1 < items) load_item(1, it + 1);
    compute_item(0);
    if ((it + 1) % groups == 0) finish_tile(it);
    if (it + 1 < items) {
      if (it + 2 < items) load_item(0, it + 2);
      compute_item(1);
      if ((it + 2) % groups == 0) finish_tile(it + 1);
    }
  }
}

void gemm_gemv_stream(const GemmArgs& a, const LaunchCtx& ctx) {
  check_gemm(a, "gemm.gemv_stream");
  if (a.m == 0) return;
  const bool fits = a.m <= kGemvMaxM && a.k % kStreamKMultiple == 0 && aligned(a.a, 16) &&
                    aligned(a.w, 16);
  if (!fits) return gemm_gemv_mma(a, ctx);  // itself falls back to cuBLAS above m = 8
  const int tiles = ceil_div(a.n, kGemvRows);
  const int blocks = std::min(tiles, sm_count());
  const auto* ap = static_cast<const bf16*>(a.a);
  const auto* wp = static_cast<const bf16*>(a.w);
  if (a.c_f32)
    gemv_stream_kernel<true><<<blocks, kStreamWarps * kWarp, 0, ctx.stream>>>(ap, wp, a.c, a.m, a.n, a.k);
  else
    gemv_stream_kernel<false><<<blocks, kStreamWarps * kWarp, 0, ctx.stream>>>(ap, wp, a.c, a.m, a.n, a.k);
  CUDA_CHECK_LAST("gemv_stream_kernel");
}

void gemm_gemv_split(const GemmArgs& a, const LaunchCtx& ctx) {
  gemm_skinny_launch(a, ctx, false);
}
void gemm_gemv_pdl(const GemmArgs& a, const LaunchCtx& ctx) {
  gemm_skinny_launch(a, ctx, true);
}

}  // namespace

// ------------------------------------------------------------------ variant 6
// Variant 5's GEMV where it serves (m <= 16), planned cuBLASLt (gemm_lt.cpp)
// everywhere else.
void gemm_lt_planned(const GemmArgs& a, const LaunchCtx& ctx) {
  if (a.m > 0 && gemm_skinny_fits(a)) return gemm_skinny_launch(a, ctx, true);
  if (a.m == 0) return;
  gemm_lt_launch(with_norm_applied(a, ctx), ctx);
}
void gemm_lt_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx) {
  if (a.m > 0 && gemm_skinny_fits(a)) return;  // the GEMV has nothing to plan
  gemm_lt_prepare(a, ctx);
}

// ------------------------------------------------------------------ variant 7
// Variant 6 wherever the batch kernel does not fit (17 <= m <= 128).
void gemm_mid_planned(const GemmArgs& a, const LaunchCtx& ctx) {
  if (gemm_mid_fits(a)) return gemm_mid_launch(with_norm_applied(a, ctx), ctx);
  gemm_lt_planned(a, ctx);
}
void gemm_mid_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx) {
  if (!gemm_mid_fits(a)) gemm_lt_planned_prepare(a, ctx);  // the batch kernel has nothing to plan
}

// ------------------------------------------------------------------ variant 8
// Variant 6 wherever the wgmma kernel does not fit (17 <= m <= 128, bf16 out, sm_90).
void gemm_wg_planned(const GemmArgs& a, const LaunchCtx& ctx) {
  if (gemm_wg_fits(a)) return gemm_wg_launch(with_norm_applied(a, ctx), ctx);  // fits: m >= 17
  gemm_lt_planned(a, ctx);
}
void gemm_wg_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx) {
  if (!gemm_wg_fits(a)) gemm_lt_planned_prepare(a, ctx);  // the wgmma kernel has nothing to plan
}

void gemm_cublas_launch(const GemmArgs& a, const LaunchCtx& ctx) {
  gemm_cublas(with_norm_applied(a, ctx), ctx);
}

void register_gemm_cuda(Registry& r) {
  r.add(make_entry<GemmArgs, gemm_cublas, gemm_cost<2>>(
      1, "seed", Backend::cuda,
      "cublasGemmEx bf16 in, fp32 compute, row-major via the transpose trick", kTestedOnly));
  r.add(make_entry<GemmArgs, gemm_gemv_mma, gemm_cost<2>>(
      2, "gemv_mma", Backend::cuda,
      "m <= 8: streams w once, 16-byte loads into mma.m16n8k16 fragments, 8 warps split k; "
      "cuBLAS above",
      kTestedOnly));
  r.add(make_entry<GemmArgs, gemm_gemv_stream, gemm_cost<2>>(
      3, "gemv_stream", Backend::cuda,
      "m <= 8, k % 2048 == 0: persistent 16-warp blocks stream row tiles with loads in flight "
      "across tiles; gemv_mma / cuBLAS otherwise",
      // Passes its GPU test on the H200 but is slower than gemv_mma (docs/performance.md):
      // tested only, so that Registry::best keeps gemv_mma as the default.
      kTestedOnly));
  r.add(with_traits(make_entry<GemmArgs, gemm_gemv_split, gemm_cost<2>>(
      4, "gemv_split", Backend::cuda,
      "m <= 16: gemv_mma's fragments with split-k over a thread-block cluster (DSMEM reduce) when "
      "the grid is under one block per SM, all of a warp's loads in flight; cuBLAS above",
      kTestedOnly), /*norm_prologue=*/true));
  r.add(with_traits(make_entry<GemmArgs, gemm_gemv_pdl, gemm_cost<2>>(
      5, "gemv_pdl", Backend::cuda,
      "gemv_split launched with programmatic dependent launch: weight loads issued before "
      "waiting for the previous kernel, dependents triggered early",
      kPreferred), /*norm_prologue=*/true));
  r.add(with_traits(make_entry<GemmArgs, gemm_lt_planned, gemm_cost<2>>(
      6, "lt_planned", Backend::cuda,
      "m <= 16: gemv_pdl; larger m: cublasLtMatmul with the algorithm timed fastest per "
      "(m bucket, n, k, out type) among the heuristic's 16 and split-k versions",
      // H200 (docs/performance.md, "gemm.6 planned cuBLASLt"): GPU tests passed; decode
      // batch 64/256 2.5-6 % faster than gemm.5, chunked prefill 23-43 % faster, batch 1
      // and a single 512-token prefill unchanged: the default.
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));
  r.add_prepare(Family::gemm, 6, make_prepare<GemmArgs, gemm_lt_planned_prepare>());
  r.add(make_entry<GemmArgs, gemm_mid_planned, gemm_cost<2>>(
      7, "mid_stream", Backend::cuda,
      "m <= 16: gemv_pdl; 17 <= m <= 128: weights and activations through a 4-stage cp.async ring "
      "into mma.sync fragments (128 rows per block), split-k over a cluster; lt_planned above",
      // H200 (docs/performance.md, "gemm.7 mid_stream"): passes its GPU tests, slower than
      // gemm.6 at m = 32-128 (batch-64 step 1.59 vs 1.32 ms): tested only.
      kTestedOnly, gemm_lt_workspace_bytes));
  r.add_prepare(Family::gemm, 7, make_prepare<GemmArgs, gemm_mid_planned_prepare>());
  r.add(with_traits(make_entry<GemmArgs, gemm_wg_planned, gemm_cost<2>>(
      8, "wgmma_split", Backend::cuda,
      "m <= 16: gemv_pdl; 17 <= m <= 128 (bf16 out): a producer thread fills a 6-8 stage ring with TMA "
      "(128-byte swizzle), two consumer warpgroups run wgmma (128 weight rows per block), split-k over a "
      "cluster; lt_planned elsewhere",
      kTestedOnly, gemm_lt_workspace_bytes), /*norm_prologue=*/true));
  r.add_prepare(Family::gemm, 8, make_prepare<GemmArgs, gemm_wg_planned_prepare>());
}

}  // namespace lantern::kernels
