// attention_decode variant 6 (split_k_pipe): paged flash-decoding whose K/V
// go through a shared-memory cp.async pipeline and whose q.k and p.v run on
// tensor cores.
//
// Variants 2-5 load K/V into registers: 4 keys in flight per lane at ~160
// registers, 3 blocks per SM, about 24 KB in flight per SM, which holds them
// to 1.2-1.5 TB/s. Here a block of 4 warps owns one (sequence, kv head, split)
// and all q heads of the GQA group as variants 4/5 do, but streams the split
// in tiles of 64 keys (16 per warp; K and V, 16 KB at head_dim 64) through a
// 3-stage cp.async ring: two tiles in flight while one is computed, ~32 KB per
// block, ~96 KB per SM. The block-table entries of the whole split are copied
// to shared memory first, so no load waits on a table lookup.
//
// Per warp and tile: S = Q K^T with mma.m16n8k16 (A = the group's q heads
// padded to 16 rows, B = 16 keys straight from ldmatrix of the K rows), an
// online softmax in the log2 domain on the accumulator fragments (row max over
// the 4 lanes of a quad), then O += P V with P re-packed from the S fragments
// as the A operand (bf16; the row sums add the rounded P, so the weights are
// the ones applied) and V through ldmatrix.trans. O stays in fp32 registers.
// Rows >= group are padding (zero q) and are never written.
//
// Splits are sized on the device from the real context (variant 4/5), the
// grid for max_context (graph-safe); the warps merge through shared memory and
// the last block of a (sequence, kv head) combines the splits (variant 3).
// Limits: head_dim 64 or 128, group <= 16, a split's block-table entries <=
// kTableCap; anything else runs variant 5.
//
// Variant 7 (split_k_pipe_heads): the same kernel with blocks of 8 warps over H
// = 8, 4, 2 or 1 adjacent kv heads (warp w: head w % H, key group w / H). A
// key's K (and V) rows of those heads are adjacent in the cache, so a tile is
// read as runs of H * head_dim * 2 bytes (at H = 8 and head_dim 64 a whole
// 16 KB half of a cache block) instead of 128-byte pieces 1 KB apart that 8
// different blocks fetch at different times. H is the largest that still gives
// >= 3/4 of the SMs a block (b = 1 at 32 k: H = 4); H * group <= 32.
#include <algorithm>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_pipe.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

// Own counters (a second array: variant 3-5's live in attention_decode.cu).
__device__ unsigned g_pipe_counters[kMaxSplitCounters];

// kEarly (variant 9): the metadata, block-table copy and the first stages'
// K/V copies are issued before griddepcontrol.wait, all but the newest row
// (position ctx - 1, written by this step's rope_kv_write; older rows were
// written by earlier steps), which is stored after the wait.
template <int HD, int H, int W, bool kEarly = false>
__global__ void __launch_bounds__(W * kWarp)
    decode_pipe_kernel(const bf16* q, bf16* out, float* part_o, float2* part_ml,
                       const int32_t* __restrict__ seq_slots, const int32_t* __restrict__ context_lens,
                       const bf16* __restrict__ pool, const int32_t* __restrict__ block_tables,
                       int block_size, int max_blocks_per_seq, int n_kv_heads, int group, int q_stride,
                       int max_context, float scale_log2) {
  using S = PipeShape<HD, H, W>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float sm_m[S::kKeyGroups * kBlockRows], sm_l[S::kKeyGroups * kBlockRows];
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + kStages * S::kTileBytes);

  trigger_dependents();    // a PDL-launched o_proj GEMV may start streaming its weights now
  if constexpr (!kEarly) grid_dependency_wait();  // q and the cache are written by earlier kernels
  const int split = blockIdx.x, kv0 = blockIdx.y * H, i = blockIdx.z, n_splits = gridDim.x;
  const int slot = seq_slots[i];  // loaded beside the context length: one round trip for both
  const int ctx = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  PipeSplit p;
  int n_eff;
  if (!pipe_split_setup<S::kThreads, HD>(p, n_eff, split, n_splits, ctx, block_tables + size_t(slot) * max_blocks_per_seq,
                                         block_size, n_kv_heads, pool + size_t(kv0) * HD, table_s))
    return;  // a split past the context (variant 4)
  const int n_tiles = p.end > p.begin ? (p.end - p.begin + S::kTileKeys - 1) / S::kTileKeys : 0;
  const int newest = kEarly ? ctx - 1 : -1;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_tiles) pipe_load_tile<S>(p, st, stages + size_t(st) * 2 * S::kTileKeys * S::kStride, newest);
    cp_async_commit();
  }
  if constexpr (kEarly) {
    grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
    pipe_store_newest<S>(p, newest, kStages - 1, stages);
  }

  const int warp = threadIdx.x / kWarp, tq = threadIdx.x % 4;  // tq: the lane's key pair in a quad
  const int hw = warp % H, kg = warp / H;  // this warp's kv head (of the block's) and key group
  // Q as the A operand, kept for the whole split.
  uint32_t qa[HD / 16][4];
  float o[HD / 8][4], m[2], l[2];
  pipe_q_and_state<HD>(q + size_t(i) * q_stride + size_t(kv0 + hw) * group * HD, group, qa, o, m, l);

  for (int tile = 0; tile < n_tiles; ++tile) {
    cp_async_wait<kStages - 2>();  // this tile has landed (for this thread's copies) ...
    __syncthreads();               // ... for every thread's, and the oldest stage is free
    const int next = tile + kStages - 1;
    if (next < n_tiles) pipe_load_tile<S>(p, next, stages + size_t(next % kStages) * 2 * S::kTileKeys * S::kStride);
    cp_async_commit();
    const bf16* k_s = stages + size_t(tile % kStages) * 2 * S::kTileKeys * S::kStride +
                      kg * kWarpKeys * S::kStride + hw * HD;
    const int key0 = p.begin + tile * S::kTileKeys + kg * kWarpKeys + 2 * tq;
    const bool ok[4] = {p.key_ok(key0), p.key_ok(key0 + 1), p.key_ok(key0 + 8), p.key_ok(key0 + 9)};
    pipe_warp_tile<HD, S::kStride>(qa, k_s, k_s + S::kTileKeys * S::kStride, ok, scale_log2, o, m, l);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages become the warps' merge buffer

  // States [key group][kv head * group + row] (each written by exactly one
  // warp): the block's q heads are the H groups' heads in order, so the split
  // tail sees one group of H * group heads.
  float* sm_o = reinterpret_cast<float*>(smem);
  pipe_store_state<HD>(o, m, l, group, kg, hw * group, sm_m, sm_l, sm_o);
  __syncthreads();
  finish_split<HD, kBlockRows, S::kKeyGroups, S::kThreads, true>(
      sm_m, sm_l, sm_o,
      SplitDest{out, part_o, part_ml, g_pipe_counters, i, int(blockIdx.y), n_kv_heads / H, H * group, q_stride,
                split, n_splits, n_eff});
}

// Blocks per SM (shared memory bounds it), asked once per instantiation; the
// dynamic shared-memory limit is raised on every launch (cheap, and right on
// whichever device is current).
template <int HD, int H, int W>
int pipe_resident_per_sm() {
  static const int n = [] {
    using S = PipeShape<HD, H, W>;
    CUDA_CHECK(cudaFuncSetAttribute(decode_pipe_kernel<HD, H, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(S::kSmem)));
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decode_pipe_kernel<HD, H, W>, S::kThreads,
                                                             S::kSmem));
    return std::max(blocks, 1);
  }();
  return n;
}

// Split count: variant 5's rule (one wave of resident blocks while >= 2 splits
// of every (sequence, kv-head block) fit) with ~2 waves' worth of blocks above
// it, capped by max_context (>= 64 keys a split) and the workspace; 0 when a
// split's block-table entries could exceed kTableCap (the longest split is
// max(64, ceil(max_context / splits)) keys, one block more when unaligned).
// LANTERN_PIPE_MAX_SPLITS (>= 1; read once) caps the count: an experiment knob
// for docs/performance.md's measurements, not a setting.
int pipe_max_splits() {
  static const int cap = [] {
    const int v = env_int("LANTERN_PIPE_MAX_SPLITS");
    return v >= 1 ? v : kMaxSplits;
  }();
  return cap;
}

int pipe_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx, long work, long resident) {
  const int max_context = std::max(a.max_context, 1);
  int splits = std::min(wave_splits(work, resident, ceil_div(2 * resident, work)), max_splits_for(max_context));
  splits = std::min(splits, pipe_max_splits());
  const size_t per_split = split_partial_bytes(a.b, a.n_q_heads, a.cache.head_dim, 1);
  if (splits > 1) splits = int(std::min<size_t>(splits, ctx.workspace ? ctx.workspace_bytes / per_split : 0));
  splits = std::max(splits, 1);
  const int longest = std::max(kMinSplitKeys, ceil_div(max_context, splits));
  return ceil_div(longest, a.cache.block_size) + 1 > kTableCap ? 0 : splits;
}

// Launches with H kv heads per block if the grid then holds at least
// `min_blocks` blocks (or force); false otherwise (nothing launched).
template <int HD, int H, int W, bool kEarly = false>
bool launch_pipe(const AttentionDecodeArgs& a, const LaunchCtx& ctx, long min_blocks, bool force) {
  using S = PipeShape<HD, H, W>;
  const KvCacheRef& c = a.cache;
  const int group = a.n_q_heads / c.n_kv_heads;
  if (c.n_kv_heads % H != 0 || H * group > kBlockRows) return false;
  const long work = long(a.b) * (c.n_kv_heads / H);
  const int splits = pipe_splits(a, ctx, work, long(pipe_resident_per_sm<HD, H, W>()) * sm_count());
  if (splits == 0 || (!force && work * splits < min_blocks)) return false;
  CUDA_CHECK(cudaFuncSetAttribute(decode_pipe_kernel<HD, H, W, kEarly>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kSmem)));
  // [b][heads][splits][hd] partial outputs (16-byte aligned), then their (max, sum).
  auto* part_o = static_cast<float*>(ctx.workspace);
  auto* part_ml = reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * splits * HD);
  launch_kernel(true, decode_pipe_kernel<HD, H, W, kEarly>, dim3(splits, c.n_kv_heads / H, a.b), dim3(S::kThreads),
                S::kSmem, ctx.stream, static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml,
                a.seq_slots, a.context_lens, static_cast<const bf16*>(c.pool), c.block_tables, c.block_size,
                c.max_blocks_per_seq, c.n_kv_heads, group, a.q_stride, std::max(a.max_context, 1),
                a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_pipe_kernel");
  return true;
}

// Variant 6: one kv head per block of 4 warps.
template <int HD, bool kEarly = false>
bool pipe_one_head(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  return launch_pipe<HD, 1, 4, kEarly>(a, ctx, 0, true);
}
// Variant 7: blocks of 8 warps over 8, 4, 2 or 1 adjacent kv heads, the most
// that still give a grid of >= 3/4 of the multiprocessors.
template <int HD>
bool pipe_head_blocks(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const long min_blocks = 3L * sm_count() / 4;
  return launch_pipe<HD, 8, 8>(a, ctx, min_blocks, false) || launch_pipe<HD, 4, 8>(a, ctx, min_blocks, false) ||
         launch_pipe<HD, 2, 8>(a, ctx, min_blocks, false) || launch_pipe<HD, 1, 8>(a, ctx, 0, true);
}

// kEarly: variant 9's from-16-sequences half (the early-load kernels).
template <bool kHeadBlocks, bool kEarly = false>
void decode_pipe(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  check_decode(a, kEarly        ? "attention_decode.split_k_early"
                  : kHeadBlocks ? "attention_decode.split_k_pipe_heads"
                                : "attention_decode.split_k_pipe");
  if (a.b == 0) return;
  bool done = false;
  if (pipe_supports(a)) {
    if (a.cache.head_dim == 64)
      done = kHeadBlocks ? pipe_head_blocks<64>(a, ctx) : pipe_one_head<64, kEarly>(a, ctx);
    else
      done = kHeadBlocks ? pipe_head_blocks<128>(a, ctx) : pipe_one_head<128, kEarly>(a, ctx);
  }
  if (done) return;
  if (kEarly) return decode_split_early(a, ctx);
  decode_split_wave(a, ctx);
}

// Variant 8: variant 5 below kAutoPipeFrom sequences, variant 6 from there up.
// H200, session 6, `lantern bench` prompt 128 x 128 decode steps in one call:
// 6 against 5 was 1.163 vs 1.002 ms per step at b = 1 (+16 %), 1.511 vs 1.600
// at b = 64 (-5.6 %) and 2.270 vs 2.507 at b = 256 (-9.5 %). The batch is fixed
// per captured graph, so the choice is graph-safe.
constexpr int kAutoPipeFrom = 16;
void decode_auto(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (a.b < kAutoPipeFrom) return decode_split_wave(a, ctx);
  decode_pipe<false>(a, ctx);
}

// Variant 9: variant 8 with both kernels in their early-load form (variant 5's
// below kAutoPipeFrom sequences, attention_decode.cu; variant 6's from there)
// when every row is its sequence's only row (AttentionDecodeArgs::
// one_row_per_seq), else variant 8: with several rows of one sequence in the
// step (a continuing prompt chunk, score mode) rows before ctx - 1 are written
// by this step too, and an early load would read them stale.
void decode_auto_early(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (!a.one_row_per_seq) return decode_auto(a, ctx);  // rows of one sequence: wait first
  if (a.b < kAutoPipeFrom) return decode_split_early(a, ctx);
  decode_pipe<false, true>(a, ctx);
}

// Variant 10: variant 8 with the crossover measured where variant 8 never was
// (session 8, H200, `lantern bench --batch 12,...,256 --prompt-len 128
// --decode-steps 96`, two processes each): 6 against 5 was 1.710-1.715 vs
// 1.191-1.195 ms per step at b = 12 and 1.712-1.715 vs 1.191-1.207 at b = 16
// (+43 %), equal within 1 % at 24 and 32, and faster from 48 rows (1.451-1.455
// vs 1.459-1.466; at 64 1.518-1.560 vs 1.587-1.596; at 256 2.202-2.227 vs
// 2.294-2.363). Graph buckets are powers of two, so in graphs this is 5 up to
// 32 rows and 6 from 64.
constexpr int kAutoPipeFromMeasured = 48;
void decode_auto_measured(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (a.b < kAutoPipeFromMeasured) return decode_split_wave(a, ctx);
  decode_pipe<false>(a, ctx);
}

// Variant 11: variant 10 whose register kernel (below 48 rows) is variant 9's
// early-load form when every row is its sequence's only row. From 48 rows it
// runs variant 10's (and 6's) wait-first pipe: the early pipe measured slower
// there (session 8, H200, prompt 128 x 128 decode steps, two rounds each: b = 256
// 2.415 / 2.413 ms with the early pipe vs 2.323 / 2.376 with variant 10; b = 1
// 0.987 / 0.976 vs 1.012 / 1.005 with the early register kernel).
void decode_auto_early_measured(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (a.b >= kAutoPipeFromMeasured || !a.one_row_per_seq) return decode_auto_measured(a, ctx);
  decode_split_early(a, ctx);
}

}  // namespace

namespace cuda_detail {
void decode_split_early48(const AttentionDecodeArgs& a, const LaunchCtx& ctx) { decode_auto_early_measured(a, ctx); }
}  // namespace cuda_detail

// Both kTestedOnly: 6 measured faster than 5 in bench_kernels and in the engine
// at b = 64/256, but not consistently at b = 1 (docs/performance.md, session 6);
// 7 is slower than 6 except at long contexts with many sequences.
void register_attention_decode_pipe_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_pipe<false>, attention_decode_cost<2>>(
      6, "split_k_pipe", Backend::cuda,
      "split_k_wave's blocks streaming K/V through a 3-stage cp.async shared-memory ring (block "
      "table staged first) with q.k and p.v on tensor cores (mma.m16n8k16, heads padded to 16)",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_pipe<true>, attention_decode_cost<2>>(
      7, "split_k_pipe_heads", Backend::cuda,
      "split_k_pipe with blocks of 8 warps over up to 8 adjacent kv heads, so each key's K/V rows "
      "are read as one contiguous H * head_dim run (whole 16 KB block halves at 8 heads)",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_auto, attention_decode_cost<2>>(
      8, "split_k_auto", Backend::cuda,
      "split_k_wave below 16 sequences, split_k_pipe from 16 up (each where it measured faster in the "
      "engine on the H200)",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_auto_early, attention_decode_cost<2>>(
      9, "split_k_early", Backend::cuda,
      "split_k_auto whose kernels load the step metadata, block-table entries and first K/V rows "
      "(all but the newest row) before the PDL dependency wait (the rerun differences once blamed "
      "on it were GEMM plans re-timed by lantern rerun, fixed in session 8)",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_auto_measured, attention_decode_cost<2>>(
      10, "split_k_auto48", Backend::cuda,
      "split_k_wave below 48 sequences, split_k_pipe from 48 up (variant 8's rule with the crossover "
      "measured on the H200: the pipe was 43 % slower per step at 12-16 sequences)",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_auto_early_measured, attention_decode_cost<2>>(
      11, "split_k_early48", Backend::cuda,
      "split_k_auto48 whose register kernel (below 48 rows) is split_k_early's: step metadata, "
      "block-table entries and the first K/V rows (all but the newest) loaded before the PDL "
      "wait, when each row is its sequence's only one",
      kPreferred, decode_split_workspace));
}

}  // namespace lantern::kernels
