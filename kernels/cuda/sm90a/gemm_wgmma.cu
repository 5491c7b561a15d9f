// gemm variant 8 (wgmma_split), gate_up_swiglu variants 4 (wg_fused) and 5
// (wg_wide) and proj_residual_norm variant 5's GEMM: a Hopper GEMM of our own
// for decode batches of 17..128 rows (gate_up_swiglu.5: also 129..256, its
// "wide form" below), c[m, n] = a[m, k] @ w[n, k]^T, built for sm_90a
// (wgmma) in its own object library (kernels/CMakeLists.txt).
//
// Why (docs/performance.md, "gemm.7 mid_stream" and the session-20 section):
// at m = 64 cuBLASLt's kernels stream o_proj's 8 MB and qkv's 12.6 MB at
// 1.1-1.6 TB/s; gemm.7's cp.async ring into mma.sync was slower still, its
// weight stream alone short of bytes in flight and its mmas not hidden. This
// kernel is what that analysis asked for:
//  - a block owns 128 weight rows (two consumer warpgroups x 64; for SwiGLU
//    64 gate rows and their 64 up rows) and a contiguous run of 64-wide k
//    stages; one producer thread fills a ring of 6-8 stages with the copy
//    engine (cp.async.bulk.tensor, 128-byte swizzle: two 64-row weight boxes
//    and one box of all m activation rows, rows past m zero-filled by the
//    copy engine), completing on a full mbarrier per stage;
//  - each consumer warpgroup runs wgmma.m64nMBk16 (MB = 32, 64 or 128 batch
//    columns) with both operands read from shared memory through 128-byte
//    swizzle descriptors: its 64 weight rows are the instruction's M side, the
//    batch its N side, so the accumulators hold c^T; a stage is released to
//    the producer (an empty mbarrier, one arrival per consumer warp) once its
//    four k16 steps have completed;
//  - split-k over a thread-block cluster of up to 8 blocks (uneven stage
//    counts allowed) while the grid is under one block per SM: each block
//    leaves its fp32 partial tile [batch][128 rows] in the drained ring and
//    block rank r sums its share of the columns over the ranks in rank order
//    through distributed shared memory (deterministic, no workspace) -- the
//    reduction and stores of gemm.7 (gemm_mid.cu);
//  - programmatic dependent launch: every weight box of the first ring's
//    worth of stages is requested before griddepcontrol.wait, the activation
//    boxes after it.
// Epilogues: bf16 c, or SwiGLU over the fused [2 inter, k] weight
// (silu(bf16(g)) * bf16(u), the unfused path's rounding points).
// The wide form (gate_up_swiglu.5's SwiGLU store; proj_residual_norm.6's bf16
// projection since session 25): 256 batch columns per block (m64n256k16), a
// 4-stage ring, one ring slot held per consumer warpgroup, the batch tiled
// over blocks above 256 rows (LANTERN_WG_WIDE_MAX_M), silu through the fast
// exponential and division (docs/performance.md, session 24).
// Fits: 17 <= m <= 128 (the wide form: 256, or the knob's cap), k % 64 == 0,
// n (inter) <= 32768, bf16 out, 16-byte aligned a and w, 8-byte aligned c, a
// compute-capability 9.0 GPU; the callers fall back to the GEMV (m <= 16) or
// gemm.6's planned cuBLASLt.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/sm90a/sm90a.h"
#include "kernels/cuda/sm90a/wg_rope.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"
#include "kernels/cuda/tma_common.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
namespace cg = cooperative_groups;

// Phase stamps for scripts/probe/wg_phases.cu (that probe includes this file
// with LANTERN_WG_PROBE defined; in the library build they compile to nothing):
// %globaltimer per block at entry, after the PDL wait, at the first full stage,
// after the last wgmma, after the partial tile's cluster barrier, after the
// reduce, at exit, and the block's SM id.
#ifdef LANTERN_WG_PROBE
__device__ unsigned long long g_wg_probe[4096][8];
#define WG_STAMP(slot)                                                   \
  do {                                                                   \
    unsigned long long t_;                                               \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));               \
    if (blockIdx.x < 4096) g_wg_probe[blockIdx.x][slot] = t_;            \
  } while (0)
#else
#define WG_STAMP(slot) \
  do {                 \
  } while (0)
#endif

constexpr int kWgRows = 128;            // weight rows per block: two consumer warpgroups x 64
constexpr int kWgKc = 64;               // k per stage: one 128-byte swizzled row per operand row
constexpr int kWgThreads = 3 * 128;     // the producer warpgroup, then two consumer warpgroups
constexpr int kWgTileLd = kWgRows + 4;  // partial tile pitch (fp32)
constexpr int kWgMinM = 17, kWgMaxM = 128, kWgMaxN = 32768, kWgMaxSplits = 8, kWgMaxStages = 8;
// The wide form (gate_up_swiglu.5 and proj_residual_norm.6 above 128 rows): 256 batch columns per
// block, the batch tiled over blocks, up to kWgWideMaxM rows by default (a
// batch-256 decode step 1-2 % faster on the H200, a 512-token prefill not;
// the knob LANTERN_WG_WIDE_MAX_M moves it up to kWgWideLimitM; above,
// cuBLASLt + swiglu).
constexpr int kWgWideMB = 256, kWgWideMaxM = 256, kWgWideLimitM = 4096;

enum class WgOut { bf16, swiglu, rope };  // rope: qkv_rope.5's epilogue (wg_rope.cuh)

template <int MB>
struct WgShape {
  static constexpr unsigned kWBytes = kWgRows * kWgKc * 2;    // 16 KB: two 64-row boxes
  static constexpr unsigned kABytes = MB * kWgKc * 2;         // one MB-row box
  static constexpr unsigned kStageBytes = kWBytes + kABytes;  // a multiple of 1024 (the swizzle atom)
  static constexpr size_t kTile = size_t(MB) * kWgTileLd * sizeof(float);
  static_assert(kStageBytes % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  // The ring of `stages` stages (the partial tile reuses it), then the barriers.
  static constexpr size_t bar_offset(int stages) {
    return size_t(stages) * kStageBytes > kTile ? size_t(stages) * kStageBytes : kTile;
  }
  static constexpr size_t smem_bytes(int stages) {
    return bar_offset(stages) + 2 * kWgMaxStages * sizeof(uint64_t) + 1024;  // + alignment slack
  }
};

// The producer (one thread): every weight box of the first ring's stages goes
// out before the PDL wait (weights are constant), their activation boxes (rows
// a_row .. a_row + MB - 1) after it (a is written by the previous kernel); each
// further stage once the consumers have released its slot.
template <int MB>
__device__ __forceinline__ void wg_produce(unsigned char* smem, uint64_t* full, uint64_t* empty,
                                           const CUtensorMap* w_map, const CUtensorMap* a_map, int row0, int row1,
                                           int a_row, int it0, int iters, int stages) {
  using S = WgShape<MB>;
  const int pre = min(iters, stages);
  for (int s = 0; s < pre; ++s) {
    unsigned char* st = smem + size_t(s) * S::kStageBytes;
    mbar_expect_tx(&full[s], S::kStageBytes);
    tma_2d(st, w_map, (it0 + s) * kWgKc, row0, &full[s]);
    tma_2d(st + S::kWBytes / 2, w_map, (it0 + s) * kWgKc, row1, &full[s]);
  }
  grid_dependency_wait();
  WG_STAMP(1);
  trigger_dependents();
  for (int s = 0; s < pre; ++s)
    tma_2d(smem + size_t(s) * S::kStageBytes + S::kWBytes, a_map, (it0 + s) * kWgKc, a_row, &full[s]);
  for (int s = pre; s < iters; ++s) {
    const int slot = s % stages;
    mbar_wait(&empty[slot], unsigned((s / stages - 1) & 1));
    unsigned char* st = smem + size_t(slot) * S::kStageBytes;
    mbar_expect_tx(&full[slot], S::kStageBytes);
    tma_2d(st, w_map, (it0 + s) * kWgKc, row0, &full[slot]);
    tma_2d(st + S::kWBytes / 2, w_map, (it0 + s) * kWgKc, row1, &full[slot]);
    tma_2d(st + S::kWBytes, a_map, (it0 + s) * kWgKc, a_row, &full[slot]);
  }
}

// Consumer warpgroup wg (0 or 1): its 64 weight rows of every stage times the
// stage's activations into acc; a stage goes back to the producer once its
// group has completed. `hold` 2: the next stage's group is issued before the
// previous one is waited for (two groups in flight, two slots held); 1: each
// group is waited for before the next is issued (one slot held, one more
// stage of the ring loading; the other warpgroup's group keeps the tensor
// cores busy meanwhile).
template <int MB>
__device__ __forceinline__ void wg_consume(float (&acc)[MB / 2], unsigned char* smem, uint64_t* full,
                                           uint64_t* empty, int wg, int lane, int iters, int stages, int hold) {
  using S = WgShape<MB>;
  const unsigned ring = smem_u32(smem);
  for (int s = 0; s < iters; ++s) {
    const int slot = s % stages;
    mbar_wait(&full[slot], unsigned((s / stages) & 1));
    if (s == 0 && wg == 0 && threadIdx.x == 128) WG_STAMP(2);
    const unsigned st = ring + unsigned(slot) * S::kStageBytes;
    const unsigned w_at = st + unsigned(wg) * (S::kWBytes / 2), a_at = st + S::kWBytes;
    fence_operands(acc);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kWgKc / 16; ++kk) wgmma_bf16<MB>(acc, sw128_desc(w_at + kk * 32), sw128_desc(a_at + kk * 32));
    wg_commit();
    if (hold == 1) {
      wg_wait_all();  // this stage's group is done: its slot goes back to the producer
      fence_operands(acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    } else {
      wg_wait_prev();  // the previous stage's group is done: its slot goes back to the producer
      fence_operands(acc);
      __syncwarp();
      if (s > 0 && lane == 0) mbar_arrive(&empty[(s - 1) % stages]);
    }
  }
  wg_wait_all();
  fence_operands(acc);
  if (wg == 0 && threadIdx.x == 128) WG_STAMP(3);
}

// A consumer warp's accumulators into the block's fp32 partial tile [batch][128 rows].
// Accumulator (i, j) of a warp: weight row 16 (warp % 4) + lane / 4 (+ 8 for i & 2),
// batch column 8 j + 2 (lane % 4) (+ 1 for i & 1).
template <int MB>
__device__ __forceinline__ void wg_store_partial(float* tile, const float (&acc)[MB / 2], int wg, int warp,
                                                 int lane) {
  const int rb = wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < MB / 8; ++j) {
    const int b0 = 8 * j + 2 * (lane % 4);
    tile[b0 * kWgTileLd + rb] = acc[4 * j];
    tile[(b0 + 1) * kWgTileLd + rb] = acc[4 * j + 1];
    tile[b0 * kWgTileLd + rb + 8] = acc[4 * j + 2];
    tile[(b0 + 1) * kWgTileLd + rb + 8] = acc[4 * j + 3];
  }
}

// Four output columns col .. col + 3 of batch row b from their fp32 sums s
// (and for SwiGLU the up sums u): bf16 c, or silu(bf16(g)) * bf16(u) --
// with kFast (the wide form) silu through the fast exponential and division
// (a few fp32 ulps from silu_mul, far below the bf16 output's rounding; the
// wide form's 64 columns x 256 rows per block made silu_mul's IEEE division
// and expf the epilogue's cost: 5.9 us at m = 256 on the H200).
template <WgOut kOut, bool kFast>
__device__ __forceinline__ void wg_store_quad(bf16* __restrict__ c, int n, int b, int out0, const float4& s,
                                              const float4& u) {
  float o[4] = {s.x, s.y, s.z, s.w};
  if constexpr (kOut == WgOut::swiglu) {
    const float uv[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float g = __bfloat162float(__float2bfloat16(o[e])), up = __bfloat162float(__float2bfloat16(uv[e]));
      o[e] = kFast ? __fdividef(g, 1.0f + __expf(-g)) * up : silu_mul(g, up);
    }
  }
  bf16* dst = c + size_t(b) * n + out0;
  if (out0 + 3 < n && n % 4 == 0) {
    __nv_bfloat162 p[2] = {__floats2bfloat162_rn(o[0], o[1]), __floats2bfloat162_rn(o[2], o[3])};
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(p);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (out0 + e < n) dst[e] = __float2bfloat16(o[e]);
  }
}

// Block rank `split` sums quads q0 .. q1 - 1 of the block's output columns
// over the cluster's ranks (in rank order: deterministic) and stores them as
// bf16 c, or silu(bf16(g)) * bf16(u) for SwiGLU (the up value of column col
// sits kCols further in the tile). Without a split the block stores its own
// tile (shared-memory loads, a constant quad count).
template <WgOut kOut, bool kFast>
__device__ __forceinline__ void wg_reduce_store(float* tile, cg::cluster_group& cluster, bf16* __restrict__ c,
                                                int m, int n, int tile_idx, int split, int splits) {
  constexpr bool kSwiglu = kOut == WgOut::swiglu;
  constexpr int kCols = kSwiglu ? kWgRows / 2 : kWgRows, kQuads = kCols / 4;
  if (splits == 1) {
    for (int item = threadIdx.x; item < m * kQuads; item += kWgThreads) {
      const int b = item / kQuads, col = item % kQuads * 4;
      const float* row = tile + b * kWgTileLd;
      const float4 s = *reinterpret_cast<const float4*>(row + col);
      const float4 u = kSwiglu ? *reinterpret_cast<const float4*>(row + kCols + col) : s;
      wg_store_quad<kOut, kFast>(c, n, b, tile_idx * kCols + col, s, u);
    }
    return;
  }
  const int q0 = split * kQuads / splits, quads = (split + 1) * kQuads / splits - q0;
  for (int item = threadIdx.x; item < m * quads; item += kWgThreads) {
    const int b = item / quads, col = (q0 + item % quads) * 4;
    // Every rank's float4 in flight at once (distributed shared memory is a
    // round trip each), then summed in rank order.
    float4 v[kWgMaxSplits], q[kSwiglu ? kWgMaxSplits : 1];
#pragma unroll
    for (int r = 0; r < kWgMaxSplits; ++r) {
      if (r >= splits) break;
      const float* tp = r == split ? tile : cluster.map_shared_rank(tile, r);
      v[r] = *reinterpret_cast<const float4*>(tp + b * kWgTileLd + col);
      if constexpr (kSwiglu) q[r] = *reinterpret_cast<const float4*>(tp + b * kWgTileLd + kCols + col);
    }
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f), u = s;
#pragma unroll
    for (int r = 0; r < kWgMaxSplits; ++r) {
      if (r >= splits) break;
      s.x += v[r].x, s.y += v[r].y, s.z += v[r].z, s.w += v[r].w;
      if constexpr (kSwiglu) u.x += q[r].x, u.y += q[r].y, u.z += q[r].z, u.w += q[r].w;
    }
    wg_store_quad<kOut, kFast>(c, n, b, tile_idx * kCols + col, s, u);
  }
}

template <int MB, WgOut kOut>
__global__ void __launch_bounds__(kWgThreads, 1)
    gemm_wg_kernel(const __grid_constant__ CUtensorMap w_map,  // [rows, k] weights, 64 x 64 boxes
                   const __grid_constant__ CUtensorMap a_map,  // [m, k] activations, 64 x MB boxes
                   bf16* __restrict__ c,                       // [m, n]
                   int m, int n, int iters_total, int splits, int up_row0, int stages, int mtiles, int hold,
                   RopeOperands rope) {
  using S = WgShape<MB>;
  constexpr bool kSwiglu = kOut == WgOut::swiglu;
  extern __shared__ unsigned char wg_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(wg_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::bar_offset(stages));
  uint64_t* empty = full + kWgMaxStages;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // Block order: split fastest (a cluster), then the batch tile, then the
  // weight tile -- the batch tiles of one weight tile run side by side, so
  // their weight boxes are read from DRAM once.
  const int split = blockIdx.x % splits, tile_idx = blockIdx.x / splits / mtiles;
  const int m0 = (blockIdx.x / splits % mtiles) * MB, rows = min(MB, m - m0);
  const int it0 = int(long(split) * iters_total / splits), iters = int(long(split + 1) * iters_total / splits) - it0;
  if (threadIdx.x == 0) {
    WG_STAMP(0);
#ifdef LANTERN_WG_PROBE
    unsigned smid_;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));
    if (blockIdx.x < 4096) g_wg_probe[blockIdx.x][7] = smid_;
#endif
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == 0) {
    if (lane == 0) {
      const int row0 = kSwiglu ? tile_idx * 64 : tile_idx * kWgRows;
      const int row1 = kSwiglu ? up_row0 + tile_idx * 64 : row0 + 64;
      wg_produce<MB>(smem, full, empty, &w_map, &a_map, row0, row1, m0, it0, iters, stages);
    }
    __syncwarp();
  }
  float acc[MB / 2];
#pragma unroll
  for (int i = 0; i < MB / 2; ++i) acc[i] = 0.0f;
  const int wg = warp / 4 - 1;  // consumer warpgroup 0 or 1; -1: the producer's
  if (wg >= 0) wg_consume<MB>(acc, smem, full, empty, wg, lane, iters, stages, hold);
  __syncthreads();         // every stage was consumed: the ring becomes the partial tile
  grid_dependency_wait();  // (done by the producer already) before any thread writes c
  float* tile = reinterpret_cast<float*>(smem);
  if (wg >= 0) wg_store_partial<MB>(tile, acc, wg, warp, lane);
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1)
    cluster.sync();  // every rank's tile is written
  else
    __syncthreads();
  if (threadIdx.x == 0) WG_STAMP(4);
  if constexpr (kOut == WgOut::rope)
    wg_rope_store<kWgRows, kWgTileLd, kWgThreads, kWgMaxSplits>(tile, cluster, c, m0, rows, n, tile_idx, split,
                                                                 splits, rope);
  else
    wg_reduce_store<kOut, (MB > kWgMaxM)>(tile, cluster, c + size_t(m0) * n, rows, n, tile_idx, split, splits);
  if (threadIdx.x == 0) WG_STAMP(5);
  if (splits > 1) cluster.sync();  // no block exits while another may read its tile
  if (threadIdx.x == 0) WG_STAMP(6);
}

struct WgCall {
  const bf16* a;
  const bf16* w;
  bf16* c;
  int m, n, k;  // n: output columns (inter for SwiGLU)
  WgOut out;
  RopeOperands rope = {};  // WgOut::rope only
};

// LANTERN_WG_MAX_SPLITS (1..8) caps the cluster size, LANTERN_WG_STAGES (2..8)
// sets the ring depth (read once; experiment knobs for docs/performance.md).
int wg_max_splits() {
  static const int cap = [] {
    const int v = env_int("LANTERN_WG_MAX_SPLITS", kWgMaxSplits);
    return v >= 1 && v <= kWgMaxSplits ? v : kWgMaxSplits;
  }();
  return cap;
}
// LANTERN_WG_HOLD (1 or 2): the ring slots a consumer warpgroup holds, i.e.
// wgmma groups in flight per warpgroup (wg_consume); by default 2, and 1 on
// the wide form (its 4-stage ring: measured 1 us faster at m = 256). Read
// once, an experiment knob for docs/performance.md.
int wg_hold(bool wide) {
  static const int v = [] {
    const int x = env_int("LANTERN_WG_HOLD", 0);
    return x == 1 || x == 2 ? x : 0;
  }();
  return v ? v : wide ? 1 : 2;
}

// The ring depth for MB batch columns: the knob, else as many stages as fit
// ~200 KB of shared memory (at most kWgMaxStages). One block per SM: with room
// for two, the cluster scheduler packs a one-wave grid two to an SM and
// leaves the other half of the SMs idle (the H200 showed it: 55 % of SM cycles
// active for o_proj at m = 64).
template <int MB>
int wg_stages() {
  static const int stages = [] {
    int st = kWgMaxStages;
    while (st > 2 && WgShape<MB>::smem_bytes(st) > 200 * 1024) --st;
    const int v = env_int("LANTERN_WG_STAGES", 0);
    return v >= 2 && v <= st ? v : st;
  }();
  return stages;
}

// The weights' and activations' maps: rows of k elements, 64 x box_rows boxes.
CUtensorMap wg_map(const void* base, int rows, int k, int box_rows) {
  return bf16_rows_map_sw128(base, rows, k, size_t(k) * sizeof(bf16), box_rows, "gemm.wgmma_split");
}

template <int MB, WgOut kOut>
auto* wg_kernel() {
  auto* kernel = gemm_wg_kernel<MB, kOut>;
  static const bool attr_set = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(WgShape<MB>::smem_bytes(wg_stages<MB>()))));
    return true;
  }();
  (void)attr_set;
  return kernel;
}

// Blocks of this kernel that can run at once in clusters of `splits` (one
// wave), asked once per (kernel, splits) of the process.
template <int MB, WgOut kOut>
int wg_capacity(int splits) {
  static std::atomic<int> known[kWgMaxSplits + 1] = {};
  if (const int c = known[splits].load(std::memory_order_relaxed)) return c;
  auto* kernel = wg_kernel<MB, kOut>();
  const size_t smem = WgShape<MB>::smem_bytes(wg_stages<MB>());
  int blocks = 0;
  if (splits == 1) {
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kWgThreads, smem));
    blocks *= sm_count();
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(splits) * 64);
    cfg.blockDim = dim3(kWgThreads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(splits);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    blocks = clusters * splits;
  }
  blocks = std::max(blocks, 1);
  known[splits].store(blocks, std::memory_order_relaxed);
  return blocks;
}

template <int MB, WgOut kOut>
void launch_wg_out(const WgCall& s, const LaunchCtx& ctx, int tiles) {
  auto* kernel = wg_kernel<MB, kOut>();
  const int stages = wg_stages<MB>();
  // (tile, batch tile) pairs; the most splits (a cluster of up to 8, at most
  // one per stage) whose grid still runs in one wave.
  const int mtiles = ceil_div(s.m, MB), iters = s.k / kWgKc;
  const long pairs = long(tiles) * mtiles;
  int splits = std::min(wg_max_splits(), iters);
  while (splits > 1 && pairs * splits > wg_capacity<MB, kOut>(splits)) --splits;
  const int w_rows = kOut == WgOut::swiglu ? 2 * s.n : s.n;
  launch_kernel_cluster(true, unsigned(splits), kernel, dim3(unsigned(pairs) * unsigned(splits)), dim3(kWgThreads),
                        WgShape<MB>::smem_bytes(stages), ctx.stream, wg_map(s.w, w_rows, s.k, 64),
                        wg_map(s.a, s.m, s.k, MB), s.c, s.m, s.n, iters, splits, s.n, stages, mtiles, wg_hold(MB > kWgMaxM),
                        s.rope);
  CUDA_CHECK_LAST("gemm_wg_kernel");
}

template <int MB>
void launch_wg(const WgCall& s, const LaunchCtx& ctx, int tiles) {
  if (s.out == WgOut::swiglu) return launch_wg_out<MB, WgOut::swiglu>(s, ctx, tiles);
  if constexpr (MB <= kWgMaxM)
    if (s.out == WgOut::rope) return launch_wg_out<MB, WgOut::rope>(s, ctx, tiles);
  launch_wg_out<MB, WgOut::bf16>(s, ctx, tiles);
}

void wg_dispatch(const WgCall& s, const LaunchCtx& ctx) {
  const int tiles = ceil_div(s.n, s.out == WgOut::swiglu ? kWgRows / 2 : kWgRows);
  if (s.m <= 32)
    launch_wg<32>(s, ctx, tiles);
  else if (s.m <= 64)
    launch_wg<64>(s, ctx, tiles);
  else if (s.m <= kWgMaxM)
    launch_wg<128>(s, ctx, tiles);
  else if (s.out == WgOut::swiglu)  // the wide form (wg_wide_max_m)
    launch_wg_out<kWgWideMB, WgOut::swiglu>(s, ctx, tiles);
  else
    launch_wg_out<kWgWideMB, WgOut::bf16>(s, ctx, tiles);
}

// LANTERN_WG_WIDE_MAX_M (129..4096, default 256): the most rows
// gate_up_swiglu.5 runs on the wide form (read once; an experiment knob for
// docs/performance.md).
int wg_wide_max_m() {
  static const int cap = [] {
    const int v = env_int("LANTERN_WG_WIDE_MAX_M", kWgWideMaxM);
    return v > kWgMaxM && v <= kWgWideLimitM ? v : kWgWideMaxM;
  }();
  return cap;
}

bool wg_fits(const void* a, const void* w, const void* c, int m, int n, int k, int max_m = kWgMaxM) {
  return m >= kWgMinM && m <= max_m && k % kWgKc == 0 && n >= 1 && n <= kWgMaxN && aligned(a, 16) &&
         aligned(w, 16) && aligned(c, 8) && sm90a_device();
}

}  // namespace

// wgmma and this cubin (sm_90a) run on compute capability 9.0 only (asked once per device).
bool sm90a_device() {
  static std::atomic<int8_t> known[64] = {};  // 0: not asked, 1: yes, -1: no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (const int8_t k = known[dev].load(std::memory_order_relaxed)) return k > 0;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool yes = major == 9 && minor == 0;
  known[dev].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
}

bool gemm_wg_fits(const GemmArgs& a) { return !a.c_f32 && wg_fits(a.a, a.w, a.c, a.m, a.n, a.k); }

void gemm_wg_launch(const GemmArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(gemm_wg_fits(a),
                "gemm.wgmma_split: shape m=%d n=%d k=%d does not fit (17 <= m <= 128, k %% 64 == 0, n <= 32768, "
                "bf16 out, an sm_90 GPU)",
                a.m, a.n, a.k);
  wg_dispatch(WgCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), static_cast<bf16*>(a.c), a.m,
                     a.n, a.k, WgOut::bf16},
              ctx);
}

bool gemm_wg_wide_launch(const GemmArgs& a, const LaunchCtx& ctx) {
  if (a.c_f32 || a.norm.weight != nullptr || a.m <= kWgMaxM ||
      !wg_fits(a.a, a.w, a.c, a.m, a.n, a.k, wg_wide_max_m()))
    return false;
  wg_dispatch(WgCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), static_cast<bf16*>(a.c), a.m,
                     a.n, a.k, WgOut::bf16},
              ctx);
  return true;
}

bool qkv_rope_wg_launch(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  const KvCacheRef& kv = a.cache;
  const int hd = kv.head_dim;
  const bool heads_fit = hd > 0 && hd % 8 == 0 && kWgRows % hd == 0 && a.n_q_heads > 0 && kv.n_kv_heads > 0 &&
                         kv.block_size > 0 && kv.max_blocks_per_seq > 0;
  if (!heads_fit || !wg_fits(a.a, a.w, a.qkv, a.m, a.cols(), a.k) || !aligned(a.q_out, 8) || !aligned(kv.pool, 8))
    return false;
  const GemmArgs g = with_norm_applied(a.gemm(), ctx);  // a prologue norm: rmsnorm ahead, as gemm.8
  WgCall s{static_cast<const bf16*>(g.a), static_cast<const bf16*>(a.w), static_cast<bf16*>(a.qkv), a.m, a.cols(),
           a.k, WgOut::rope};
  s.rope = rope_operands(a);
  wg_dispatch(s, ctx);
  return true;
}

bool gate_up_swiglu_wg_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx, bool wide) {
  if (!wg_fits(a.a, a.w, a.out, a.m, a.inter, a.k, wide ? wg_wide_max_m() : kWgMaxM)) return false;
  wg_dispatch(WgCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), static_cast<bf16*>(a.out), a.m,
                     a.inter, a.k, WgOut::swiglu},
              ctx);
  return true;
}

}  // namespace lantern::kernels
