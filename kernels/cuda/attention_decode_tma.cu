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
#include <algorithm>
#include <unordered_map>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_tma.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

template <int St>
constexpr size_t kTmaSmem = 1024 + St * kStageBytes + kTableCap * sizeof(int);  // + alignment slack

// Variant 20: contexts of up to this many keys run as one split (no combine):
// on the H200 a batch-1 step at contexts 129-256 took 0.873-0.887 ms with one split of up
// to 4 tiles against 0.902-0.911 with 64-key splits and the combine (its
// fence, arrival atomic and partials' round trip cost more than 3 more tiles
// in one block); at 513-640 keys longer splits lost (256-key splits 0.938-0.942
// vs 0.906), so longer contexts keep 64-key splits (docs/performance.md,
// session 25).
constexpr int kTmaOneSplitKeys = 256;

// Arrival counters of variant 17's fused combine: one per (sequence, kv head).
__device__ unsigned g_tma_counters[kMaxSplitCounters];

// Variant 16: St = 2, one split (gridDim.z == 1), no combine. Variant 17:
// gridDim.z splits of whole 64-key tiles sized on the device from the real
// context, a St-deep ring, and the last block of (sequence, kv head) combines
// the splits (kFused). With one split both are the same arithmetic.
template <int St, bool kFused, int kMinBlocks, bool kWs = false, int kOneSplit = 0>
__global__ void __launch_bounds__((kWs ? 5 : 4) * kWarp, kMinBlocks)
    decode_tma_kernel(const __grid_constant__ CUtensorMap kv_map, const bf16* q, bf16* out, float* part_o,
                      float2* part_ml, const int32_t* __restrict__ seq_slots,
                      const int32_t* __restrict__ context_lens, const int32_t* __restrict__ block_tables,
                      int block_size, int max_blocks_per_seq, int n_kv_heads, int group, int q_stride,
                      int max_context, float scale_log2, int split_slowest) {
  using S = TS<St>;
  constexpr int kThreads = (kWs ? 5 : 4) * kWarp;  // kWs: warp 4 is the producer
  extern __shared__ unsigned char smem_raw[];
  __shared__ float sm_m[S::kKeyGroups * kBlockRows], sm_l[S::kKeyGroups * kBlockRows];
  __shared__ __align__(8) uint64_t full[St], empty[St];
  unsigned char* smem = smem_raw + (1024 - smem_u32(smem_raw) % 1024) % 1024;  // SWIZZLE_128B: 1 KB aligned
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + St * kStageBytes);
  auto stage = [&](int tile) { return stage_at(stages, tile % St); };

  trigger_dependents();  // the o_proj GEMV may start streaming its weights now
  // Split slowest (grid: kv heads, sequences, splits): the block scheduler dispatches in linear
  // block order, so every sequence's low splits, which hold the keys when the context is short
  // (pipe_split_setup), become resident first when an earlier kernel (qkv_rope.2's GEMV) still
  // occupies SMs at the early launch (session 31). LANTERN_TMA_SPLIT_SLOWEST=0: the grid before,
  // (splits, kv heads, sequences).
  const int kv0 = split_slowest ? blockIdx.x : blockIdx.y, i = split_slowest ? blockIdx.y : blockIdx.z;
  const int split = split_slowest ? blockIdx.z : blockIdx.x, n_splits = split_slowest ? gridDim.z : gridDim.x;
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
  if (!pipe_split_setup<kThreads, kHd, S::kTileKeys, kOneSplit>(p, n_eff, split, n_splits, ctx,
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
  const int n_first = min(St, n_tiles);
  if (producer) tma_first_tiles(&kv_map, p, kv0, n_first, newest_group, stages, full);
  grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
  if (producer) tma_newest_group(&kv_map, p, kv0, n_first, newest_group, stages, full);
  // Stage next % St is free again: load tile `next` into it.
  auto refill = [&](int next) { tma_tile(&kv_map, p, kv0, next, stage(next), &full[next % St]); };
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

}  // namespace

// The driver's tensor-map encoder, through the runtime (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 cuda_detail::tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    LANTERN_CHECK(found == cudaDriverEntryPointSuccess && f,
                  "the driver has no cuTensorMapEncodeTiled (needs CUDA 12+); pick kernel variants without TMA "
                  "(attention_decode 14, gemm 6)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

CUtensorMap cuda_detail::bf16_rows_map_sw128(const void* base, int rows, int cols, size_t row_bytes, int box_rows,
                                             const char* who) {
  struct Key {
    const void* base;
    int rows, cols;
    size_t row_bytes;
    int box;
    bool operator==(const Key& o) const {
      return base == o.base && rows == o.rows && cols == o.cols && row_bytes == o.row_bytes && box == o.box;
    }
  };
  struct Hash {
    size_t operator()(const Key& x) const {
      return std::hash<const void*>()(x.base) ^ (size_t(x.rows) * 0x9e3779b97f4a7c15ull) ^ (size_t(x.cols) << 20) ^
             (x.row_bytes << 36) ^ size_t(x.box);
    }
  };
  thread_local std::unordered_map<Key, CUtensorMap, Hash> maps;
  const Key key{base, rows, cols, row_bytes, box_rows};
  if (auto it = maps.find(key); it != maps.end()) return it->second;
  if (maps.size() > 4096) maps.clear();  // bounded: buffers freed and reallocated elsewhere
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)}, elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
                                          strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LANTERN_CHECK(r == CUDA_SUCCESS, "%s: cuTensorMapEncodeTiled failed (%d) for %d rows x %d columns", who, int(r),
                rows, cols);
  return maps.emplace(key, map).first->second;
}

// The paged pool as rows of one kv head (see the top of the file); the row
// count is not bounded by the pool (a launch only addresses its table's blocks).
// Encoded once per pool and thread: an engine launches it for every layer of
// every eager step with the same pool.
const CUtensorMap& cuda_detail::pool_rows_map(const KvCacheRef& c) {
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

namespace {

// LANTERN_TMA_SPLIT_SLOWEST (default 1): the grid order above; an A/B knob, read once.
int split_slowest_knob() {
  static const int v = env_int("LANTERN_TMA_SPLIT_SLOWEST", 1) != 0;
  return v;
}

template <int St, int kMinBlocks, bool kWs = false>
void launch_tma(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits, const char* who,
                bool one_short = false) {
  const KvCacheRef& c = a.cache;
  auto* kernel = splits <= 1  ? decode_tma_kernel<St, false, kMinBlocks, kWs>
                 : one_short ? decode_tma_kernel<St, true, kMinBlocks, kWs, kTmaOneSplitKeys>
                             : decode_tma_kernel<St, true, kMinBlocks, kWs>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kTmaSmem<St>)));
  // [b][q heads][splits][head_dim] partial outputs, then their (max, sum); unused with one split.
  auto* part_o = splits > 1 ? static_cast<float*>(ctx.workspace) : nullptr;
  auto* part_ml = splits > 1 ? reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * splits * kHd) : nullptr;
  const int slowest = split_slowest_knob();
  const dim3 grid = slowest ? dim3(c.n_kv_heads, a.b, splits) : dim3(splits, c.n_kv_heads, a.b);
  launch_kernel(true, kernel, grid, dim3((kWs ? 5 : 4) * kWarp), kTmaSmem<St>, ctx.stream,
                pool_rows_map(c), static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml,
                a.seq_slots, a.context_lens, c.block_tables, c.block_size, c.max_blocks_per_seq, c.n_kv_heads,
                a.n_q_heads / c.n_kv_heads, a.q_stride, std::max(a.max_context, 1), a.scale * 1.4426950408889634f, slowest);
  CUDA_CHECK_LAST("decode_tma_kernel");
}

}  // namespace

bool cuda_detail::tma_supports(const AttentionDecodeArgs& a) {
  return a.cache.head_dim == kHd && a.cache.block_size % kBoxKeys == 0 && a.n_q_heads / a.cache.n_kv_heads <= 8;
}

namespace {

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
  auto fits = [&](int n) { return split_table_fits(max_context, n, 64, bs); };  // whole 64-key tiles
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

}  // namespace

void cuda_detail::decode_tma_split_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx, bool one_short) {
  const char* who = one_short ? "attention_decode.split_persist_one" : "attention_decode.split_tma_t";
  check_decode(a, who);
  if (a.b == 0) return;
  const int splits = a.one_row_per_seq && pipe_supports(a) && tma_supports(a) && batched_transposed_splits(a, ctx) == 0
                         ? tma_splits(a, ctx)
                         : 0;
  if (splits == 0) return decode_batched_transposed(a, ctx, who);
  const bool ws = tma_ws_knob() != 0;
  const bool one = one_short;
  switch (split_tma_stages()) {
    case 2:
      return ws ? launch_tma<2, 4, true>(a, ctx, splits, who, one) : launch_tma<2, 4>(a, ctx, splits, who, one);
    case 4:
      return ws ? launch_tma<4, 2, true>(a, ctx, splits, who, one) : launch_tma<4, 2>(a, ctx, splits, who, one);
    default:
      return ws ? launch_tma<3, 2, true>(a, ctx, splits, who, one) : launch_tma<3, 2>(a, ctx, splits, who, one);
  }
}

namespace {
void decode_tma_split_t_entry(const AttentionDecodeArgs& a, const LaunchCtx& ctx) { decode_tma_split_t(a, ctx); }
}  // namespace

void register_attention_decode_tma_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_tma_t, attention_decode_cost<2>>(
      16, "batched_tma_t", Backend::cuda,
      "batched_ring6_t with its K/V ring filled by the TMA: one thread issues a 16-row box of K and "
      "one of V per 16-key group (SWIZZLE_128B = the ring's XOR swizzle), the warps wait on the "
      "stage's mbarrier; head_dim 64, block sizes that are multiples of 16, one split; else "
      "batched_ring6_t",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_tma_split_t_entry, attention_decode_cost<2>>(
      17, "split_tma_t", Backend::cuda,
      "batched_ring6_t below 24 rows with batched_tma_t's TMA-filled ring (3 stages) split over the "
      "context: one wave of 2 blocks per SM, splits of whole 64-key tiles sized from the real "
      "context, a producer warp refills the ring, the last block combines; head_dim 64, block "
      "sizes that are multiples of 16, GQA groups <= 8; else batched_ring6_t",
      kPreferred, decode_split_workspace));
}

}  // namespace lantern::kernels
