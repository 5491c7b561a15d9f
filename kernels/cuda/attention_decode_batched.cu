// attention_decode variant 12 (batched_ring): decode attention for batches of
// >= 48 sequences, each with one row (the decode steps of a large batch).
//
// What it changes against variant 11's pipe kernel (variant 6, from 48 rows),
// measured on the H200 in session 9 (docs/performance.md): at these batches
// there are already >= 384 (sequence, kv head) pairs, about one wave of blocks,
// so splitting a short context only adds blocks, waves and the combine
// (LANTERN_PIPE_MAX_SPLITS=1 made the batch-64 step 121 us faster); and each
// block streams only ~40 KB (a 128-200-token context), so its fixed chain
// (metadata -> block table -> first K/V, then q) is most of its life. Here:
// - one split per (sequence, kv head) unless the block table of a context of
//   max_context keys would not fit the shared-memory copy (then the fewest
//   splits that fit, combined by the last block as variant 6 does);
// - everything except q and the newest K/V row (written by this step's
//   rope_kv_write) is issued before griddepcontrol.wait: step metadata, the
//   block-table copy and every stage of the ring (variant 9's early pipe only
//   issued kStages - 1 tiles), so a context of up to kStages tiles is wholly in
//   flight while the kernels before it run;
// - the ring is refilled after the tile is computed (two barriers per tile),
//   so all kStages buffers are in flight at once;
// - a 2-stage ring and __launch_bounds__ for 5 blocks per SM at head_dim 64
//   (LANTERN_PIPE_STAGES=3 selects the 3-stage ring at variant 6's occupancy:
//   an experiment knob).
#include <algorithm>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_pipe.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

__device__ unsigned g_batched_counters[kMaxSplitCounters];

constexpr int kBatchedFrom = 48;  // rows: below, variant 11 (its register kernel measured faster)
// Variant 14: from 24 rows (in graphs the 32-row bucket). H200, session 13,
// `lantern bench --batch 8,16,24,32,48 --prompt-len 128 --decode-steps 64`, two
// rounds: 24 rows 1.148-1.153 ms per step against 1.314-1.338 with variant 11's
// register kernel, 32 rows 1.168-1.169 against 1.363-1.388; 16 rows slower
// (1.369-1.376 against 1.150-1.159), 8 rows slower (1.105-1.122 against 1.008-1.015).
constexpr int kBatchedFromT = 24;

// LANTERN_BATCHED_FROM (>= 1; read once) overrides the crossover of variants
// 12-14: an experiment knob for docs/performance.md's measurements, not a setting.
int batched_from(bool transposed) {
  static const int env_from = std::max(env_int("LANTERN_BATCHED_FROM"), 0);
  return env_from ? env_from : transposed ? kBatchedFromT : kBatchedFrom;
}

// kT (variant 14): the transposed warp tile (pipe_warp_tile_t; GQA groups <= 8).
template <int HD, int St, bool kFused, int kMinBlocks, bool kSwz, bool kT = false>
__global__ void __launch_bounds__(4 * kWarp, kMinBlocks)
    decode_batched_kernel(const bf16* q, bf16* out, float* part_o, float2* part_ml,
                          const int32_t* __restrict__ seq_slots, const int32_t* __restrict__ context_lens,
                          const bf16* __restrict__ pool, const int32_t* __restrict__ block_tables, int block_size,
                          int max_blocks_per_seq, int n_kv_heads, int group, int q_stride, int max_context,
                          float scale_log2) {
  using S = PipeShape<HD, 1, 4, St, kSwz>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float sm_m[S::kKeyGroups * kBlockRows], sm_l[S::kKeyGroups * kBlockRows];
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + St * S::kTileBytes);
  auto stage = [&](int tile) { return stages + size_t(tile % St) * 2 * S::kTileKeys * S::kStride; };

  trigger_dependents();  // the o_proj GEMV may start streaming its weights now
  // Metadata and block tables are uploaded before the step's kernels; older
  // K/V rows were written by earlier steps: all safe to read before the wait.
  const int split = blockIdx.x, kv0 = blockIdx.y, i = blockIdx.z, n_splits = gridDim.x;
  const int slot = seq_slots[i];
  const int ctx = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  PipeSplit p;
  int n_eff;
  if (!pipe_split_setup<S::kThreads, HD>(p, n_eff, split, n_splits, ctx, block_tables + size_t(slot) * max_blocks_per_seq,
                                         block_size, n_kv_heads, pool + size_t(kv0) * HD, table_s)) {
    grid_dependency_wait();  // nothing to do, but exit no earlier than a waiting block would
    return;
  }
  const int n_tiles = p.end > p.begin ? (p.end - p.begin + S::kTileKeys - 1) / S::kTileKeys : 0;
  const int newest = ctx - 1;
#pragma unroll
  for (int st = 0; st < St; ++st) {
    if (st < n_tiles) pipe_load_tile<S>(p, st, stage(st), newest);
    cp_async_commit();
  }
  grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
  pipe_store_newest<S>(p, newest, St, stages);

  const int warp = threadIdx.x / kWarp, tq = threadIdx.x % 4;  // tq: the lane's key pair in a quad
  const bf16* qh = q + size_t(i) * q_stride + size_t(kv0) * group * HD;
  // The warp's state: transposed (kT) or as variants 12 / 13 hold it.
  uint32_t qa[kT ? 1 : HD / 16][4], qb[kT ? HD / 16 : 1][2];
  float o[kT ? HD / 16 : HD / 8][4], m[2], l[2];
  if constexpr (kT)
    pipe_qt_and_state<HD>(qh, group, qb, o, m, l);
  else
    pipe_q_and_state<HD>(qh, group, qa, o, m, l);

  // Tile t is group t (one commit per tile issued or not): St - 1 newer groups may stay pending.
  for (int tile = 0; tile < n_tiles; ++tile) {
    cp_async_wait<St - 1>();
    __syncthreads();  // every thread's copies (and the newest row's stores) of this tile are visible
    const bf16* k_s = stage(tile) + warp * kWarpKeys * S::kStride;
    const bf16* v_s = k_s + S::kTileKeys * S::kStride;
    const int kbase = p.begin + tile * S::kTileKeys + warp * kWarpKeys;
    if constexpr (kT) {
      const int g = (threadIdx.x % kWarp) / 4;
      const bool ok[2] = {p.key_ok(kbase + g), p.key_ok(kbase + g + 8)};
      pipe_warp_tile_t<HD, S::kStride, S::kSwizzle>(qb, k_s, v_s, ok, scale_log2, o, m, l);
    } else {
      const int key0 = kbase + 2 * tq;
      const bool ok[4] = {p.key_ok(key0), p.key_ok(key0 + 1), p.key_ok(key0 + 8), p.key_ok(key0 + 9)};
      pipe_warp_tile<HD, S::kStride, S::kSwizzle>(qa, k_s, v_s, ok, scale_log2, o, m, l);
    }
    __syncthreads();  // the stage is read: refill it
    if (tile + St < n_tiles) pipe_load_tile<S>(p, tile + St, stage(tile));
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages become the warps' merge buffer

  float* sm_o = reinterpret_cast<float*>(smem);
  if constexpr (kT)
    pipe_store_state_t<HD>(o, m, l, group, warp, 0, sm_m, sm_l, sm_o);
  else
    pipe_store_state<HD>(o, m, l, group, warp, 0, sm_m, sm_l, sm_o);
  __syncthreads();
  finish_split<HD, kBlockRows, S::kKeyGroups, S::kThreads, kFused>(
      sm_m, sm_l, sm_o,
      SplitDest{out, part_o, part_ml, g_batched_counters, i, kv0, n_kv_heads, group, q_stride, split, n_splits,
                n_eff});
}

// LANTERN_PIPE_STAGES=3 (read once): the 3-stage ring (experiment knob).
bool three_stages() {
  static const bool on = env_int("LANTERN_PIPE_STAGES") == 3;
  return on;
}

// The fewest splits whose longest split's block-table entries fit kTableCap
// (0: none up to kMaxSplits, or the workspace cannot hold their partials).
int batched_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const int max_context = std::max(a.max_context, 1);
  for (int s = 1; s <= kMaxSplits; ++s) {
    const int longest = std::max(kMinSplitKeys, ceil_div(max_context, s));
    if (ceil_div(longest, a.cache.block_size) + 1 > kTableCap) continue;
    if (s > 1 && (!ctx.workspace ||
                  ctx.workspace_bytes < split_partial_bytes(a.b, a.n_q_heads, a.cache.head_dim, s)))
      return 0;
    return s;
  }
  return 0;
}

template <int HD, int St, bool kFused, int kMinBlocks, bool kSwz = false, bool kT = false>
void launch_batched(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits) {
  using S = PipeShape<HD, 1, 4, St, kSwz>;
  auto* kernel = decode_batched_kernel<HD, St, kFused, kMinBlocks, kSwz, kT>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kSmem)));
  const KvCacheRef& c = a.cache;
  auto* part_o = static_cast<float*>(ctx.workspace);
  auto* part_ml = reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * splits * HD);
  launch_kernel(true, kernel, dim3(splits, c.n_kv_heads, a.b), dim3(S::kThreads), S::kSmem, ctx.stream,
                static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml, a.seq_slots,
                a.context_lens, static_cast<const bf16*>(c.pool), c.block_tables, c.block_size,
                c.max_blocks_per_seq, c.n_kv_heads, a.n_q_heads / c.n_kv_heads, a.q_stride,
                std::max(a.max_context, 1), a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_batched_kernel");
}

template <int HD, bool kT = false>
void batched_for(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits) {
  if (three_stages())
    return splits > 1 ? launch_batched<HD, 3, true, 1, false, kT>(a, ctx, splits)
                      : launch_batched<HD, 3, false, 1, false, kT>(a, ctx, 1);
  // 5 blocks per SM at head_dim 64 (96 registers, no spills); at 128 the ring's
  // 70 KB of shared memory allows 3, which need no register cap.
  constexpr int kMin = HD == 64 ? 5 : 1;
  splits > 1 ? launch_batched<HD, 2, true, kMin, false, kT>(a, ctx, splits)
             : launch_batched<HD, 2, false, kMin, false, kT>(a, ctx, 1);
}

// Variants 12, 13 and 14: variant 11 below kBatchedFrom rows (14: kBatchedFromT), with several rows of
// one sequence, or for shapes the pipe does not serve; this kernel otherwise.
// Variant 13 (`six`) is variant 12 with the swizzled, unpadded ring at head_dim
// 64 -- 32 KB instead of 36 KB of stages, 80 registers: 6 blocks per SM (792 on
// the H200), so 256 sequences x 8 kv heads take 3 waves of blocks instead of 4
// (H200: batch 256 -83 / -106 us per step, batch 128 -8 / -22, batch 64 +18 /
// +19 in two rounds). It runs variant 12's kernel where that grid fits one
// wave of 5 blocks per SM (the extra resident block buys nothing there and its
// 80-register cap cost ~1 % at batch 64), at head_dim 128 and with the 3-stage
// knob. Variant 14 (`transposed`) is variant 13 with the transposed warp tile
// wherever the GQA group is <= 8 (pipe_warp_tile_t: half the mma and
// exponentials); larger groups run variant 13.
void decode_batched_ring(const AttentionDecodeArgs& a, const LaunchCtx& ctx, const char* who, bool six,
                         bool transposed = false) {
  check_decode(a, who);
  if (a.b == 0) return;
  const bool t = transposed && a.n_q_heads / a.cache.n_kv_heads <= 8;
  const int splits = a.b >= batched_from(t) && a.one_row_per_seq && pipe_supports(a) ? batched_splits(a, ctx) : 0;
  if (splits == 0) return decode_split_early48(a, ctx);
  const bool beyond_a_wave = long(a.b) * a.cache.n_kv_heads * splits > 5L * sm_count();
  if (six && a.cache.head_dim == 64 && !three_stages() && beyond_a_wave) {
    if (t)
      return splits > 1 ? launch_batched<64, 2, true, 6, true, true>(a, ctx, splits)
                        : launch_batched<64, 2, false, 6, true, true>(a, ctx, 1);
    return splits > 1 ? launch_batched<64, 2, true, 6, true>(a, ctx, splits)
                      : launch_batched<64, 2, false, 6, true>(a, ctx, 1);
  }
  if (t) return a.cache.head_dim == 64 ? batched_for<64, true>(a, ctx, splits) : batched_for<128, true>(a, ctx, splits);
  a.cache.head_dim == 64 ? batched_for<64>(a, ctx, splits) : batched_for<128>(a, ctx, splits);
}
void decode_batched(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_batched_ring(a, ctx, "attention_decode.batched_ring", false);
}
void decode_batched6(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_batched_ring(a, ctx, "attention_decode.batched_ring6", true);
}
void decode_batched6t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_batched_ring(a, ctx, "attention_decode.batched_ring6_t", true, true);
}

// ---- Variant 15 (batched_heads_t): a block per (sequence, run of hpb
// adjacent kv heads) instead of per (sequence, kv head). Variant 14 at batch
// 256 runs 2048 short blocks (a 128-200-key context: 2-4 tiles each) in three
// waves, and each pays its own start chain -- slot -> block-table copy ->
// first tiles -- before its first mma. Here the heads of a run share the
// sequence's metadata and block-table copy, and the run's (head, tile) items
// stream through one 2-stage ring: the next head's first tiles are in flight
// while the current head's last tile is computed, and a head's four warp
// states are merged and written while the ring keeps loading. hpb is the
// fewest heads that make the grid one resident wave of 4 blocks per SM (batch
// 256 x 8 kv heads: runs of 4, 512 blocks; batch 64: single heads). The run's
// q rows are staged in shared memory after the wait (out may alias q: every
// block reads all its q before it writes). Head_dim 64, groups <= 8, one split.
constexpr int kRunRows = 8;    // merge-buffer rows per warp state: a GQA group of <= 8
constexpr int kRunQRows = 32;  // q rows staged per block: hpb x group

template <int HD>
__global__ void __launch_bounds__(4 * kWarp, 4)
    decode_heads_kernel(const bf16* q, bf16* out, const int32_t* __restrict__ seq_slots,
                        const int32_t* __restrict__ context_lens, const bf16* __restrict__ pool,
                        const int32_t* __restrict__ block_tables, int block_size, int max_blocks_per_seq,
                        int n_kv_heads, int group, int q_stride, int max_context, int hpb, float scale_log2) {
  constexpr int St = 2;
  using S = PipeShape<HD, 1, 4, St, true>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float sm_m[S::kKeyGroups * kRunRows], sm_l[S::kKeyGroups * kRunRows];
  __shared__ __align__(16) float sm_o[S::kKeyGroups * kRunRows * HD];
  __shared__ __align__(16) bf16 sm_q[kRunQRows * HD];
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + St * S::kTileBytes);
  auto stage = [&](int item) { return stages + size_t(item % St) * 2 * S::kTileKeys * S::kStride; };

  trigger_dependents();
  const int kv_first = blockIdx.x * hpb, i = blockIdx.y;
  const int slot = seq_slots[i];
  const int ctx = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  PipeSplit p;
  int n_eff;
  pipe_split_setup<S::kThreads, HD>(p, n_eff, 0, 1, ctx, block_tables + size_t(slot) * max_blocks_per_seq,
                                    block_size, n_kv_heads, pool + size_t(kv_first) * HD, table_s);
  // At least one tile per head (an empty context: every key masked, output 0).
  const int n_tiles = max(1, (p.end - p.begin + S::kTileKeys - 1) / S::kTileKeys);
  const int n_items = hpb * n_tiles;  // item j: head j / n_tiles, tile j % n_tiles
  const int newest = ctx - 1, newest_tile = newest / S::kTileKeys;
  auto head_split = [&](int h) {
    PipeSplit ph = p;
    ph.head_base = p.head_base + size_t(h) * HD;
    return ph;
  };
#pragma unroll
  for (int st = 0; st < St; ++st) {
    if (st < n_items) pipe_load_tile<S>(head_split(st / n_tiles), st % n_tiles, stage(st), newest);
    cp_async_commit();
  }
  grid_dependency_wait();  // q and the newest K/V rows are written by earlier kernels
  for (int st = 0; st < St && st < n_items; ++st)
    if (newest >= 0 && st % n_tiles == newest_tile)
      pipe_store_row<S>(head_split(st / n_tiles), newest, newest - newest_tile * S::kTileKeys, stage(st));
  const bf16* q_run = q + size_t(i) * q_stride + size_t(kv_first) * group * HD;
  for (int u = threadIdx.x; u < hpb * group * HD / 8; u += S::kThreads)
    reinterpret_cast<uint4*>(sm_q)[u] = reinterpret_cast<const uint4*>(q_run)[u];

  const int warp = threadIdx.x / kWarp, g = (threadIdx.x % kWarp) / 4;
  uint32_t qb[HD / 16][2];
  float o[HD / 16][4], m[2], l[2];
  for (int item = 0; item < n_items; ++item) {
    const int h = item / n_tiles, tile = item - h * n_tiles;
    cp_async_wait<St - 1>();
    __syncthreads();  // this item's copies, the newest rows and the staged q are visible
    if (tile == 0) pipe_qt_and_state<HD>(sm_q + size_t(h) * group * HD, group, qb, o, m, l);
    const bf16* k_s = stage(item) + warp * kWarpKeys * S::kStride;
    const int kbase = p.begin + tile * S::kTileKeys + warp * kWarpKeys;
    const bool ok[2] = {p.key_ok(kbase + g), p.key_ok(kbase + g + 8)};
    pipe_warp_tile_t<HD, S::kStride, true>(qb, k_s, k_s + S::kTileKeys * S::kStride, ok, scale_log2, o, m, l);
    const bool head_done = tile == n_tiles - 1;
    if (head_done) pipe_store_state_t<HD, kRunRows>(o, m, l, group, warp, 0, sm_m, sm_l, sm_o);
    __syncthreads();  // the stage is read (and a finished head's states stored): refill it
    if (item + St < n_items) pipe_load_tile<S>(head_split((item + St) / n_tiles), (item + St) % n_tiles, stage(item));
    cp_async_commit();
    // The merge reads sm_o while the ring loads; the next head's store comes
    // after the next item's first barrier, which every thread reaches only
    // once its part of this merge is done.
    if (head_done)
      finish_split<HD, kRunRows, S::kKeyGroups, S::kThreads, false>(
          sm_m, sm_l, sm_o,
          SplitDest{out, nullptr, nullptr, nullptr, i, kv_first + h, n_kv_heads, group, q_stride, 0, 1, 1});
  }
  cp_async_wait<0>();
}

// The fewest adjacent kv heads per block that make the grid one resident wave
// of 4 blocks per SM (all of them when none does), within the staged q rows.
// LANTERN_HEADS_WAVE=N (1-4, read once) sizes the wave for N blocks per SM
// instead: an experiment knob (fewer, longer blocks leave the SMs' shared
// memory to the next kernel's PDL-launched blocks sooner).
int heads_per_block(int b, int n_kv_heads, int group) {
  static const long wave = [] {
    const int v = env_int("LANTERN_HEADS_WAVE");
    return long(v >= 1 && v <= 4 ? v : 4);
  }();
  int best = 1;
  for (int h = 1; h <= n_kv_heads; ++h) {
    if (n_kv_heads % h || h * group > kRunQRows) continue;
    best = h;
    if (long(b) * (n_kv_heads / h) <= wave * sm_count()) break;
  }
  return best;
}

// Variant 15: its kernel where it applies (head_dim 64, group <= 8, from
// variant 14's 24 rows, one row per sequence, one split); else variant 14.
void decode_heads_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const char* who = "attention_decode.batched_heads_t";
  check_decode(a, who);
  if (a.b == 0) return;
  if (a.cache.head_dim != 64 || batched_transposed_splits(a, ctx) != 1) return decode_batched_transposed(a, ctx, who);
  const int group = a.n_q_heads / a.cache.n_kv_heads;
  using S = PipeShape<64, 1, 4, 2, true>;
  auto* kernel = decode_heads_kernel<64>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kSmem)));
  const KvCacheRef& c = a.cache;
  const int hpb = heads_per_block(a.b, c.n_kv_heads, group);
  launch_kernel(true, kernel, dim3(c.n_kv_heads / hpb, a.b), dim3(S::kThreads), S::kSmem, ctx.stream,
                static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), a.seq_slots, a.context_lens,
                static_cast<const bf16*>(c.pool), c.block_tables, c.block_size, c.max_blocks_per_seq, c.n_kv_heads,
                group, a.q_stride, std::max(a.max_context, 1), hpb, a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_heads_kernel");
}

}  // namespace

namespace cuda_detail {
void decode_batched_transposed(const AttentionDecodeArgs& a, const LaunchCtx& ctx, const char* who) {
  decode_batched_ring(a, ctx, who, true, true);
}
int batched_transposed_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const bool t = a.n_q_heads / a.cache.n_kv_heads <= 8;
  return t && a.b >= batched_from(true) && a.one_row_per_seq && pipe_supports(a) ? batched_splits(a, ctx) : 0;
}
}  // namespace cuda_detail

void register_attention_decode_batched_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_batched, attention_decode_cost<2>>(
      12, "batched_ring", Backend::cuda,
      "split_k_early48 below 48 rows; from 48 one-row sequences one block per (sequence, kv head) "
      "(splits only where the block table needs them) whose whole 2-stage ring, metadata and "
      "block-table copy are issued before the PDL wait, at 5 blocks per SM",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_batched6, attention_decode_cost<2>>(
      13, "batched_ring6", Backend::cuda,
      "batched_ring with its K/V ring unpadded and XOR-swizzled (unit ^ key % 8) at head_dim 64: 32 KB of "
      "stages and 80 registers, 6 blocks per SM (3 waves instead of 4 at 256 sequences) beyond one wave of "
      "batched_ring's grid; else batched_ring",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_batched6t, attention_decode_cost<2>>(
      14, "batched_ring6_t", Backend::cuda,
      "batched_ring6 with the warp tile transposed (S^T = K Q^T: keys on the mma's m side, a GQA group "
      "of <= 8 q heads on its n side, P^T through movmatrix.trans), and its own kernel from 24 rows "
      "instead of 48: half the mma and exponentials of "
      "a group of 4; larger groups run batched_ring6's kernel",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_heads_t, attention_decode_cost<2>>(
      15, "batched_heads_t", Backend::cuda,
      "batched_ring6_t with a block per (sequence, run of adjacent kv heads): the run shares the "
      "sequence's metadata and block-table copy and streams its heads' tiles through one ring; runs as "
      "short as make the grid one wave of 4 blocks per SM (4 heads at 256 sequences)",
      kTestedOnly, decode_split_workspace));
}

}  // namespace lantern::kernels
