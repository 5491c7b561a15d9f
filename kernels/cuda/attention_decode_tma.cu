// attention_decode variant 16 (batched_tma_t): variant 14's kernel with its
// K/V ring filled by the Tensor Memory Accelerator instead of cp.async; and
// variant 17 (split_tma_t, the default; below): the same kernel split over the
// context for the batches under 24 rows.
//
// Why: Nsight Compute put the batched kernel at 66 % of the SM's issue slots
// with DRAM at 46 % (session 13), and half of a thread's instructions per tile
// are its share of the ring's loads: 1024 16-byte cp.async per 64-key tile,
// each with a block-table lookup, a block/row split and the swizzled address.
// Here one thread issues eight TMA copies per tile -- per 16-key group of the
// tile (one cache block's rows when block_size is 16) a box of 16 rows x 128
// bytes for K and one for V -- and the warps wait on the stage's mbarrier
// instead of on their own copies. The tensor map sees the paged pool as rows
// of one kv head's 64 dims: dims (head_dim, kv head, row), strides (2 B,
// head_dim * 2 B, n_kv_heads * head_dim * 2 B); a cache block b's K rows are
// rows 2b * block_size .. and its V rows follow. SWIZZLE_128B stores 16-byte
// unit u of a row r at u ^ (r % 8): exactly variant 13's XOR-swizzled ring
// (`pipe_at`), so variant 14's warp tile reads it unchanged. A hole in the
// block table or a group past the context reads rows at negative coordinates,
// which the TMA unit fills with zeros; the V rows past the context inside the
// last cache block are stale and are zeroed by their warp before use.
//
// Everything but the newest K/V row's group is issued before the PDL wait (as
// variant 12's ring); that group's two boxes after it. Same arithmetic and
// merge as variant 14: bit-identical to it (tested). Head_dim 64, GQA groups
// <= 8, block sizes that are multiples of 16, one split; else variant 14.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_pipe.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kHd = 64, kBoxKeys = 16;
template <int St>
using TS = PipeShape<kHd, 1, 4, St, true>;  // 64-key tiles, 128-byte unpadded swizzled rows
static_assert(TS<2>::kStride == kHd && TS<2>::kTileKeys == 4 * kBoxKeys);
constexpr unsigned kStageBytes = 2 * TS<2>::kTileKeys * TS<2>::kStride * sizeof(bf16);  // K then V: 16 KB
template <int St>
constexpr size_t kTmaSmem = 1024 + St * kStageBytes + kTableCap * sizeof(int);  // + alignment slack

// Arrival counters of variant 17's fused combine: one per (sequence, kv head).
__device__ unsigned g_tma_counters[kMaxSplitCounters];

__device__ __forceinline__ unsigned smem_u32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
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
  if (kbase + kWarpKeys > p.end) {
    for (int u = lane; u < kWarpKeys * 8; u += kWarp)
      if (kbase + u / 8 >= p.end) reinterpret_cast<uint4*>(v_s)[u] = make_uint4(0, 0, 0, 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
  }
  const bool ok[2] = {p.key_ok(kbase + g), p.key_ok(kbase + g + 8)};
  pipe_warp_tile_t<kHd, kStride, true>(qb, k_s, v_s, ok, scale_log2, o, m, l);
}

// Variant 16: St = 2, one split (gridDim.x == 1), no combine. Variant 17:
// gridDim.x splits of whole 64-key tiles sized on the device from the real
// context, a St-deep ring, and the last block of (sequence, kv head) combines
// the splits (kFused). With one split both are the same arithmetic.
template <int St, bool kFused, int kMinBlocks, bool kWs = false>
__global__ void __launch_bounds__((kWs ? 5 : 4) * kWarp, kMinBlocks)
    decode_tma_kernel(const __grid_constant__ CUtensorMap kv_map, const bf16* q, bf16* out, float* part_o,
                      float2* part_ml, const int32_t* __restrict__ seq_slots,
                      const int32_t* __restrict__ context_lens, const int32_t* __restrict__ block_tables,
                      int block_size, int max_blocks_per_seq, int n_kv_heads, int group, int q_stride,
                      int max_context, float scale_log2) {
  using S = TS<St>;
  constexpr int kThreads = (kWs ? 5 : 4) * kWarp;  // kWs: warp 4 is the producer
  extern __shared__ unsigned char smem_raw[];
  __shared__ float sm_m[S::kKeyGroups * kBlockRows], sm_l[S::kKeyGroups * kBlockRows];
  __shared__ __align__(8) uint64_t full[St], empty[St];
  unsigned char* smem = smem_raw + (1024 - smem_u32(smem_raw) % 1024) % 1024;  // SWIZZLE_128B: 1 KB aligned
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + St * kStageBytes);
  auto stage = [&](int tile) { return stages + size_t(tile % St) * (kStageBytes / sizeof(bf16)); };

  trigger_dependents();  // the o_proj GEMV may start streaming its weights now
  const int split = blockIdx.x, n_splits = gridDim.x, kv0 = blockIdx.y, i = blockIdx.z;
  const int slot = seq_slots[i];
  const int ctx = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  if (threadIdx.x == 0) {
    for (int s = 0; s < St; ++s) {
      mbar_init(&full[s], 1);
      if (kWs) mbar_init(&empty[s], S::kKeyGroups);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  PipeSplit p;
  int n_eff;
  // Ends with a barrier, which also publishes the mbarriers.
  if (!pipe_split_setup<kThreads, kHd, S::kTileKeys>(p, n_eff, split, n_splits, ctx,
                                                         block_tables + size_t(slot) * max_blocks_per_seq,
                                                         block_size, n_kv_heads, nullptr, table_s)) {
    grid_dependency_wait();  // nothing to do, but exit no earlier than a waiting block would
    return;
  }
  const int n_tiles = max(1, (p.end - p.begin + S::kTileKeys - 1) / S::kTileKeys);
  // The newest key's group (written by this step's rope_kv_write), if this split holds it.
  const int newest_group = ctx >= 1 && ctx - 1 >= p.begin ? (ctx - 1 - p.begin) / kBoxKeys : -1;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const bool producer = kWs ? warp == S::kKeyGroups && lane == 0 : threadIdx.x == 0;
  if (producer)
    for (int st = 0; st < St && st < n_tiles; ++st) {
      mbar_expect_tx(&full[st], kStageBytes);
      for (int kg = 0; kg < 4; ++kg)
        if (st * 4 + kg != newest_group) tma_group(&kv_map, p, kv0, st, kg, stage(st), &full[st]);
    }
  grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
  if (producer && newest_group >= 0 && newest_group / 4 < St)
    tma_group(&kv_map, p, kv0, newest_group / 4, newest_group % 4, stage(newest_group / 4),
              &full[newest_group / 4]);
  auto refill = [&](int next) {  // stage next % St is free again: load tile `next` into it
    uint64_t* bar = &full[next % St];
    mbar_expect_tx(bar, kStageBytes);
    for (int kg = 0; kg < 4; ++kg) tma_group(&kv_map, p, kv0, next, kg, stage(next), bar);
  };
  uint32_t qb[kHd / 16][2];
  float o[kHd / 16][4], m[2], l[2];
  if (kWs && warp == S::kKeyGroups) {  // the producer warp: refill each stage once its 4 warps released it
    if (producer)
      for (int next = St; next < n_tiles; ++next) {
        mbar_wait(&empty[next % St], (next / St - 1) & 1);
        refill(next);
      }
    // Lanes 1-31 skipped the loop: reconverge before the block barrier below
    // (__syncthreads is bar.sync, an .aligned barrier: every thread of a warp
    // must execute it together).
    __syncwarp();
  } else {
    pipe_qt_and_state<kHd>(q + size_t(i) * q_stride + size_t(kv0) * group * kHd, group, qb, o, m, l);
    for (int tile = 0; tile < n_tiles; ++tile) {
      mbar_wait(&full[tile % St], (tile / St) & 1);
      tma_warp_tile(p, stage(tile) + warp * kWarpKeys * S::kStride, p.begin + tile * S::kTileKeys + warp * kWarpKeys,
                    qb, scale_log2, o, m, l);
      if constexpr (kWs) {
        __syncwarp();  // the warp has read its part of the stage: release it
        if (lane == 0) mbar_arrive(&empty[tile % St]);
      } else {
        __syncthreads();  // every warp has read the stage: refill it
        if (producer && tile + St < n_tiles) refill(tile + St);
      }
    }
  }
  if constexpr (kWs) __syncthreads();  // every consumer warp is done with the stages
  // Every issued stage was waited for: the stages become the warps' merge buffer.
  if (!kWs || warp < S::kKeyGroups)
    pipe_store_state_t<kHd>(o, m, l, group, warp, 0, sm_m, sm_l, reinterpret_cast<float*>(smem));
  __syncthreads();
  finish_split<kHd, kBlockRows, S::kKeyGroups, kThreads, kFused>(
      sm_m, sm_l, reinterpret_cast<const float*>(smem),
      SplitDest{out, part_o, part_ml, g_tma_counters, i, kv0, n_kv_heads, group, q_stride, split, n_splits, n_eff});
}

// The driver's tensor-map encoder, through the runtime (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    LANTERN_CHECK(found == cudaDriverEntryPointSuccess && f,
                  "attention_decode.batched_tma_t: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+); "
                  "pick another attention_decode variant");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The paged pool as rows of one kv head (see the top of the file); the row
// count is not bounded by the pool (a launch only addresses its table's blocks).
// Encoded once per pool and thread: an engine launches it for every layer of
// every eager step with the same pool.
const CUtensorMap& pool_rows_map(const KvCacheRef& c) {
  struct Cached {
    const void* pool = nullptr;
    int n_kv_heads = 0, head_dim = 0;
    CUtensorMap map;
  };
  thread_local Cached cached;
  if (cached.pool == c.pool && cached.n_kv_heads == c.n_kv_heads && cached.head_dim == c.head_dim)
    return cached.map;
  CUtensorMap& map = cached.map;
  cached.pool = nullptr;  // until the encoding below succeeds
  const cuuint64_t dims[3] = {cuuint64_t(c.head_dim), cuuint64_t(c.n_kv_heads), cuuint64_t(1) << 31};
  const cuuint64_t strides[2] = {cuuint64_t(c.head_dim) * sizeof(bf16),
                                 cuuint64_t(c.n_kv_heads) * c.head_dim * sizeof(bf16)};
  const cuuint32_t box[3] = {cuuint32_t(kHd), 1, cuuint32_t(kBoxKeys)}, elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, c.pool, dims, strides, box,
                                          elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LANTERN_CHECK(r == CUDA_SUCCESS, "attention_decode.batched_tma_t: cuTensorMapEncodeTiled failed (%d) for the KV pool",
                int(r));
  cached.pool = c.pool;
  cached.n_kv_heads = c.n_kv_heads;
  cached.head_dim = c.head_dim;
  return map;
}

template <int St, int kMinBlocks, bool kWs = false>
void launch_tma(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits, const char* who) {
  const KvCacheRef& c = a.cache;
  auto* kernel =
      splits > 1 ? decode_tma_kernel<St, true, kMinBlocks, kWs> : decode_tma_kernel<St, false, kMinBlocks, kWs>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kTmaSmem<St>)));
  // [b][q heads][splits][head_dim] partial outputs, then their (max, sum); unused with one split.
  auto* part_o = splits > 1 ? static_cast<float*>(ctx.workspace) : nullptr;
  auto* part_ml = splits > 1 ? reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * splits * kHd) : nullptr;
  launch_kernel(true, kernel, dim3(splits, c.n_kv_heads, a.b), dim3((kWs ? 5 : 4) * kWarp), kTmaSmem<St>, ctx.stream,
                pool_rows_map(c), static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml,
                a.seq_slots, a.context_lens, c.block_tables, c.block_size, c.max_blocks_per_seq, c.n_kv_heads,
                a.n_q_heads / c.n_kv_heads, a.q_stride, std::max(a.max_context, 1), a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_tma_kernel");
}

bool tma_supports(const AttentionDecodeArgs& a) {
  return a.cache.head_dim == kHd && a.cache.block_size % kBoxKeys == 0 && a.n_q_heads / a.cache.n_kv_heads <= 8;
}

// The producer-warp form: a fifth warp refills each stage once the four
// consumer warps have released it (an mbarrier per stage), so no warp waits
// for the others at a block barrier per tile. Variant 17's default since
// session 16; LANTERN_TMA_WS (read once) = 0 gives both variants the barrier
// form (thread 0 refills after the block barrier that ends each tile), 1 both
// the producer warp; unset: 17 the producer warp, 16 the barrier form.
// H200, `lantern bench`: batch 1 / 32 k 1.250-1.280 ms per step vs
// 1.342-1.402 with the barrier form; batch 8 / 4 k 1.343 vs 1.394; prompt 128
// at batch 1-8 equal within 10 us (docs/performance.md, sessions 15-16).
// Session 15 kept it a knob for a suspected race: a variant 18 of that
// session (this one-split form from 24 rows) differed from variant 14 in 8 of
// 3840 positions of the 160-sequence graph test. Session 16 found the cause
// outside the kernel: that variant ran variant 17's split path below 24 rows,
// which the test's tail steps reach, and which is not bit-identical to 14 (a
// new variant 18 with the same fallback gave the same 8 of 3840, 1.07e-2;
// without it, 0). The one-split producer-warp form is bit-identical to 14 in
// 16 repeats of that test; racecheck and synccheck are clean.
int tma_ws_knob() {
  static const int v = env_int("LANTERN_TMA_WS", -1);
  return v;
}

void decode_tma_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const char* who = "attention_decode.batched_tma_t";
  check_decode(a, who);
  if (a.b == 0) return;
  if (!tma_supports(a) || batched_transposed_splits(a, ctx) != 1) return decode_batched_transposed(a, ctx, who);
  tma_ws_knob() == 1 ? launch_tma<2, 6, true>(a, ctx, 1, who) : launch_tma<2, 6>(a, ctx, 1, who);
}

// ---- Variant 17 (split_tma_t): below the rows where variant 14 runs its own
// kernel (24), variant 14 runs variant 11's register kernel, whose loads keep
// too few bytes in flight for long contexts: at batch 1 / 32 k it reads the
// 67 MB of a layer's K/V at 1.43 TB/s (docs/performance.md, session 12), while
// a probe of the same access pattern through a shared-memory ring reached
// 4.45 TB/s with >= 64 KB in flight per SM. Here variant 16's TMA-filled ring,
// St stages deep, serves one (sequence, kv head, split) per block: splits of
// whole 64-key tiles, as many as make the grid one wave of 2 blocks per SM
// (batch 1 on the H200: 33 per kv head), each sized on the device from the
// real context (graph-safe), the last block of a (sequence, kv head)
// combining them; a fifth, producer warp refills a stage once the four
// consumer warps released it (above; LANTERN_TMA_WS=0: thread 0 refills after
// the block barrier that ends each tile). From 24 rows, and below 3 splits,
// variant 14.
// The ring is 3 stages deep (two 61 KB blocks fit the one-row steps' 50 %
// carveout; 4 stages made the 32 k step 1.78 ms, a second wave under it).
// LANTERN_TMA_STAGES = 2, 3 or 4 (ring depth) and
// LANTERN_TMA_BLOCKS_PER_SM (default 2): experiment knobs, read once.
int split_tma_stages() {
  static const int v = env_int("LANTERN_TMA_STAGES", 3);
  return v == 2 || v == 4 ? v : 3;
}
int split_tma_blocks_per_sm() {
  static const int v = std::clamp(env_int("LANTERN_TMA_BLOCKS_PER_SM", 2), 1, 8);
  return v;
}

constexpr int kMinTmaSplits = 3;

// The splits of variant 17's grid for `a` (0: it does not apply).
int tma_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const int max_context = std::max(a.max_context, 1), bs = a.cache.block_size;
  const long work = long(a.b) * a.cache.n_kv_heads;
  auto fits = [&](int n) {  // the longest split's block-table entries fit the shared copy
    const int len = ceil_div(std::max(kMinSplitKeys, ceil_div(max_context, n)), 64) * 64;
    return ceil_div(len, bs) + 1 <= kTableCap;
  };
  int s = int(std::clamp<long>(split_tma_blocks_per_sm() * long(sm_count()) / work, 1, max_splits_for(max_context)));
  // Fewer than 3 splits in a wave (16 rows x 8 kv heads on the H200): variant
  // 11's register kernel measured as fast or faster (1.170-1.175 vs 1.180-1.186
  // ms per 16-row step, session 15).
  if (s < kMinTmaSplits) return 0;
  while (s < kMaxSplits && !fits(s)) ++s;
  if (!fits(s)) return 0;
  if (s > 1 && (!ctx.workspace || ctx.workspace_bytes < split_partial_bytes(a.b, a.n_q_heads, kHd, s))) return 0;
  return s;
}

void decode_tma_split_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const char* who = "attention_decode.split_tma_t";
  check_decode(a, who);
  if (a.b == 0) return;
  const int splits = a.one_row_per_seq && pipe_supports(a) && tma_supports(a) && batched_transposed_splits(a, ctx) == 0
                         ? tma_splits(a, ctx)
                         : 0;
  if (splits == 0) return decode_batched_transposed(a, ctx, who);
  const bool ws = tma_ws_knob() != 0;
  switch (split_tma_stages()) {
    case 2:
      return ws ? launch_tma<2, 4, true>(a, ctx, splits, who) : launch_tma<2, 4>(a, ctx, splits, who);
    case 4:
      return ws ? launch_tma<4, 2, true>(a, ctx, splits, who) : launch_tma<4, 2>(a, ctx, splits, who);
    default:
      return ws ? launch_tma<3, 2, true>(a, ctx, splits, who) : launch_tma<3, 2>(a, ctx, splits, who);
  }
}


// ---- Variant 18 (persistent_tma_t): from 24 rows, where variant 14 runs one
// block per (sequence, kv head) in 2-3 waves, a persistent grid of as many
// blocks as fit at once, each walking the (sequence, kv head) items
// blockIdx.x, blockIdx.x + gridDim.x, ... through one TMA-filled ring that
// streams across item boundaries: the producer warp issues the next item's
// slot, table entries and first tiles while the four consumer warps still
// compute the current item, so neither the per-block start chain (slot ->
// block table -> first tile) nor a wave's tail sits on the path -- session 14
// found variant 16's batch-256 kernel latency-bound on exactly those (42.8 %
// of its stalls on that chain, 15 % of the SM time idle in the last wave).
// Per item the same tiles, order and merge as variants 14 and 16:
// bit-identical to them. The consumer warps merge an item's four states
// through a buffer of their own (the ring keeps streaming) between two named
// barriers of the 128 consumer threads. Below 24 rows, and where variant 14's
// grid is one wave (below), variant 14. Variant 19 (the default since session
// 16): variant 17 below 24 rows, 18 from 24.
constexpr int kPersistRows = 8;  // merge-buffer rows per state: the group's q heads (<= 8)

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(4 * kWarp) : "memory"); }

// Item `item` = (sequence i, kv head kv) as a one-split PipeSplit over its whole
// context, its block-table row read in place (global memory); returns its tiles.
__device__ __forceinline__ int persist_item(int item, int n_kv_heads, const int32_t* seq_slots,
                                            const int32_t* context_lens, const int32_t* block_tables,
                                            int block_size, int max_blocks_per_seq, int max_context, PipeSplit& p,
                                            int& i, int& kv) {
  i = item / n_kv_heads;
  kv = item % n_kv_heads;
  const int slot = seq_slots[i];
  p.begin = 0;
  p.end = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  p.block_size = block_size;
  p.bs_shift = (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
  p.first_blk = 0;
  p.table_s = block_tables + size_t(slot) * max_blocks_per_seq;
  return max(1, (p.end + 4 * kBoxKeys - 1) / (4 * kBoxKeys));
}

template <int St>
__global__ void __launch_bounds__(5 * kWarp)
    decode_persist_kernel(const __grid_constant__ CUtensorMap kv_map, const bf16* q, bf16* out,
                          const int32_t* __restrict__ seq_slots, const int32_t* __restrict__ context_lens,
                          const int32_t* __restrict__ block_tables, int block_size, int max_blocks_per_seq,
                          int n_kv_heads, int group, int q_stride, int max_context, int n_items, float scale_log2) {
  using S = TS<St>;
  constexpr int kConsumers = S::kKeyGroups;  // warps 0-3; warp 4 is the producer
  extern __shared__ unsigned char smem_raw[];
  __shared__ float sm_m[kConsumers * kPersistRows], sm_l[kConsumers * kPersistRows];
  __shared__ __align__(16) float sm_o[kConsumers * kPersistRows * kHd];
  __shared__ __align__(8) uint64_t full[St], empty[St];
  unsigned char* smem = smem_raw + (1024 - smem_u32(smem_raw) % 1024) % 1024;  // SWIZZLE_128B: 1 KB aligned
  bf16* stages = reinterpret_cast<bf16*>(smem);
  auto stage = [&](int n) { return stages + size_t(n % St) * (kStageBytes / sizeof(bf16)); };

  trigger_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < St; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  PipeSplit p;
  int i, kv;
  if (warp == kConsumers) {  // the producer warp; n counts this block's tiles (stage n % St)
    if (lane == 0) {
      int n = 0;
      for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int n_tiles = persist_item(item, n_kv_heads, seq_slots, context_lens, block_tables, block_size,
                                         max_blocks_per_seq, max_context, p, i, kv);
        int t = 0;
        if (n == 0) {  // the first item: all but the newest K/V row's group before the PDL wait (as variant 16)
          const int newest_group = p.end >= 1 ? (p.end - 1) / kBoxKeys : -1;
          for (; t < St && t < n_tiles; ++t) {
            mbar_expect_tx(&full[t], kStageBytes);
            for (int kg = 0; kg < 4; ++kg)
              if (t * 4 + kg != newest_group) tma_group(&kv_map, p, kv, t, kg, stage(t), &full[t]);
          }
          grid_dependency_wait();
          if (newest_group >= 0 && newest_group / 4 < t)
            tma_group(&kv_map, p, kv, newest_group / 4, newest_group % 4, stage(newest_group / 4),
                      &full[newest_group / 4]);
          n = t;
        }
        for (; t < n_tiles; ++t, ++n) {
          if (n >= St) mbar_wait(&empty[n % St], (n / St - 1) & 1);
          mbar_expect_tx(&full[n % St], kStageBytes);
          for (int kg = 0; kg < 4; ++kg) tma_group(&kv_map, p, kv, t, kg, stage(n), &full[n % St]);
        }
      }
    }
    __syncwarp();
    return;
  }
  grid_dependency_wait();  // q (and the newest K/V rows, through the producer) come from earlier kernels
  int n = 0;
  for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int n_tiles = persist_item(item, n_kv_heads, seq_slots, context_lens, block_tables, block_size,
                                     max_blocks_per_seq, max_context, p, i, kv);
    uint32_t qb[kHd / 16][2];
    float o[kHd / 16][4], m[2], l[2];
    pipe_qt_and_state<kHd>(q + size_t(i) * q_stride + size_t(kv) * group * kHd, group, qb, o, m, l);
    for (int t = 0; t < n_tiles; ++t, ++n) {
      mbar_wait(&full[n % St], (n / St) & 1);
      tma_warp_tile(p, stage(n) + warp * kWarpKeys * S::kStride, t * S::kTileKeys + warp * kWarpKeys, qb,
                    scale_log2, o, m, l);
      __syncwarp();  // the warp has read (and maybe zeroed) its part of the stage: release it
      if (lane == 0) mbar_arrive(&empty[n % St]);
    }
    pipe_store_state_t<kHd, kPersistRows>(o, m, l, group, warp, 0, sm_m, sm_l, sm_o);
    consumer_sync();
    finish_split<kHd, kPersistRows, kConsumers, kConsumers * kWarp, false>(
        sm_m, sm_l, sm_o, SplitDest{out, nullptr, nullptr, nullptr, i, kv, n_kv_heads, group, q_stride, 0, 1, 1});
    consumer_sync();  // the merge buffer is read: the next item may store into it
  }
}

// Ring depth of variant 18: LANTERN_PERSIST_STAGES = 2, 3 or 4 (an experiment
// knob, read once). Default 2 (4 blocks per SM, the 93 registers' limit; 3 and 4 stages keep 3, shared memory's): H200,
// session 16, three interleaved rounds, batch 128 1.518-1.531 ms per step vs
// 1.526-1.585 (4 stages) and 1.537-1.544 (3), batch 256 2.081-2.097 vs
// 2.088-2.166 and 2.088-2.148; bench_kernels b = 256 / ctx 512 77.4 vs 80.6
// us. LANTERN_PERSIST_FROM = the rows from which it runs (default 24).
int persist_stages() {
  static const int v = env_int("LANTERN_PERSIST_STAGES", 2);
  return v == 3 || v == 4 ? v : 2;
}
int persist_from() {
  static const int v = std::max(1, env_int("LANTERN_PERSIST_FROM", 24));
  return v;
}

template <int St>
constexpr size_t kPersistSmem = 1024 + St * kStageBytes;  // + alignment slack

// Resident blocks per SM of the St-stage persistent kernel (the driver's carveout choice).
template <int St>
int persist_blocks_per_sm() {
  static const int per_sm = [] {
    auto* kernel = decode_persist_kernel<St>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPersistSmem<St>)));
    int r = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r, kernel, 5 * kWarp, kPersistSmem<St>));
    return std::max(r, 1);
  }();
  return per_sm;
}

template <int St>
void launch_persist(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const KvCacheRef& c = a.cache;
  auto* kernel = decode_persist_kernel<St>;
  constexpr size_t kSmem = kPersistSmem<St>;
  const int n_items = a.b * c.n_kv_heads;
  const int grid = int(std::min<long>(n_items, long(persist_blocks_per_sm<St>()) * sm_count()));
  launch_kernel(true, kernel, dim3(grid), dim3(5 * kWarp), kSmem, ctx.stream, pool_rows_map(c),
                static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), a.seq_slots, a.context_lens,
                c.block_tables, c.block_size, c.max_blocks_per_seq, c.n_kv_heads, a.n_q_heads / c.n_kv_heads,
                a.q_stride, std::max(a.max_context, 1), n_items, a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_persist_kernel");
}

// Where variant 14 would run its one-split kernel in one wave (6 blocks per SM
// resident at head_dim 64; the 2-stage persistent kernel keeps 4), every
// persistent block would own one or two items and gain nothing: batch 64 /
// ctx 4 k measured 173 vs 149 us (bench_kernels, H200, session 16). Those
// batches keep variant 14.
constexpr long kBatchedWaveBlocksPerSm = 6;
bool persist_pays(const AttentionDecodeArgs& a) {
  return long(a.b) * a.cache.n_kv_heads > kBatchedWaveBlocksPerSm * sm_count();
}

template <int St>
void persist_or_batched(const AttentionDecodeArgs& a, const LaunchCtx& ctx, const char* who) {
  if (persist_pays(a)) return launch_persist<St>(a, ctx);
  decode_batched_transposed(a, ctx, who);
}

void decode_persist_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx, const char* who) {
  check_decode(a, who);
  if (a.b == 0) return;
  if (a.b < persist_from() || !tma_supports(a) || !pipe_supports(a) || batched_transposed_splits(a, ctx) != 1)
    return decode_batched_transposed(a, ctx, who);
  switch (persist_stages()) {
    case 3:
      return persist_or_batched<3>(a, ctx, who);
    case 4:
      return persist_or_batched<4>(a, ctx, who);
    default:
      return persist_or_batched<2>(a, ctx, who);
  }
}

// Variant 18: the persistent kernel where it pays from 24 rows, variant 14
// everywhere else (bit-identical to 14 throughout).
void decode_persist_only_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_persist_t(a, ctx, "attention_decode.persistent_tma_t");
}

// Variant 19 (split_persist_t): variant 17 below 24 rows, variant 18 from 24.
void decode_split_persist_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (a.b < persist_from()) return decode_tma_split_t(a, ctx);
  decode_persist_t(a, ctx, "attention_decode.split_persist_t");
}

}  // namespace

void register_attention_decode_tma_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_tma_t, attention_decode_cost<2>>(
      16, "batched_tma_t", Backend::cuda,
      "batched_ring6_t with its K/V ring filled by the TMA: one thread issues a 16-row box of K and "
      "one of V per 16-key group (SWIZZLE_128B = the ring's XOR swizzle), the warps wait on the "
      "stage's mbarrier; head_dim 64, block sizes that are multiples of 16, one split; else "
      "batched_ring6_t",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_tma_split_t, attention_decode_cost<2>>(
      17, "split_tma_t", Backend::cuda,
      "batched_ring6_t below 24 rows with batched_tma_t's TMA-filled ring (3 stages) split over the "
      "context: one wave of 2 blocks per SM, splits of whole 64-key tiles sized from the real "
      "context, a producer warp refills the ring, the last block combines; head_dim 64, block sizes that are multiples of 16, GQA "
      "groups <= 8; else batched_ring6_t",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_persist_only_t, attention_decode_cost<2>>(
      18, "persistent_tma_t", Backend::cuda,
      "batched_ring6_t, but from 24 rows where its one-split grid would need more than one wave, a "
      "persistent grid whose blocks walk (sequence, kv head) items through one 2-stage TMA-filled "
      "ring streaming across items (a producer warp issues the next item's tiles while 4 warps "
      "compute): bit-identical to batched_ring6_t; head_dim 64, block sizes that are multiples of "
      "16, GQA groups <= 8",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_split_persist_t, attention_decode_cost<2>>(
      19, "split_persist_t", Backend::cuda,
      "split_tma_t below 24 rows, persistent_tma_t from 24 rows", kPreferred, decode_split_workspace));
}

}  // namespace lantern::kernels
