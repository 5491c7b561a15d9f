// attention_decode variant 21 (split_rows_t): variant 20, but where its split
// kernel (variant 17) would run -- below 24 rows, contexts past 256 keys -- a
// kernel whose block reads whole K/V rows: every kv head of a 16-key group.
//
// Why (docs/performance.md, session 38): at batch 1 / 32 k on an H100,
// Nsight Compute put variant 17's kernel at 56 % of DRAM bandwidth (1.87 TB/s)
// with 96 KB of TMA copies in flight per SM, and 43 % of its warp-stall
// samples on the consumer warps' wait for a stage's mbarrier: data starved,
// not issue bound. More blocks per SM (3 or 4, 2- to 4-stage rings) made the
// 32 k step 0.17-0.19 ms slower, not faster. Variant 17's block owns one kv
// head, so it reads 128 bytes of every 1 KB K/V row (8 kv heads x 64 dims x
// bf16), and the eight blocks that read the rest of those rows run on other
// SMs, drifting apart: each DRAM page is opened for 128 bytes at a time.
// Here a block owns (sequence, split) and all 8 kv heads: a stage is one
// 16-key group, K then V, 8 heads each (32 KB: 16 TMA boxes of 2 KB issued
// back to back by one thread, one cache block's 16 contiguous KB of K and of
// V), and warp w (0-7) runs kv head w's GQA group over the stage exactly as a
// variant-17 warp runs its 16 keys of a tile (pipe_warp_tile_t on the same
// swizzled 16 x 128-byte boxes); warp 8 is the producer. One block per SM
// (3 stages, 96 KB, fit the one-row steps' 50 % carveout), as many splits as
// SMs at batch 1 (splits of whole 16-key groups sized on the device from the
// real context). Each warp writes its heads' partial (max, sum, output)
// directly -- no merge across warps -- and a second kernel, one block per (q
// head, sequence), combines the splits (too many partials for one block's
// fused tail: 132 splits x 32 heads x 64 dims).
//
// Variant 22 (split_rows_cluster_t) is the same split kernel launched in
// clusters of 8 splits (session 39), to take the combine kernel's launch and
// dependency off the path: the cluster's blocks merge their states through
// distributed shared memory (block rank r merges kv head r), so a sequence has
// one partial per cluster (16 at batch 1), and the last cluster to finish
// combines them (attention_decode_rows.cuh). Splits = 8 x the clusters that fit
// one wave (cudaOccupancyMaxActiveClusters) / batch.
//
// The newest K/V row's group is issued after the PDL wait, everything else in
// the first St stages before it, as in variant 17. Not bit-identical to 17 (a
// different split and merge order); tested against the CPU reference. Needs 8
// kv heads of head_dim 64, GQA groups <= 8, block sizes that are multiples of
// 16; else variant 20.
#include <algorithm>
#include <cstdio>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_rows.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

// Group t of the split (16 keys), K and V of every head, into stage st.
__device__ __forceinline__ void rows_issue(const CUtensorMap* map, const PipeSplit& p, int t, bf16* st,
                                           uint64_t* bar) {
  mbar_expect_tx(bar, kRowsStageBytes);
  const int t0 = p.begin + t * kBoxKeys;
  const int blk = t0 < p.end ? p.table_s[p.blk_of(t0) - p.first_blk] : -1;
  const int row_k = blk >= 0 ? blk * 2 * p.block_size + p.row_of(t0) : -4 * kBoxKeys;  // negative: zeros
  const int row_v = blk >= 0 ? row_k + p.block_size : row_k;
#pragma unroll
  for (int h = 0; h < kRowsHeads; ++h) {
    tma_rows(st + h * kBoxElems, map, h, row_k, bar);
    tma_rows(st + (kRowsHeads + h) * kBoxElems, map, h, row_v, bar);
  }
}

// The consumer loop of warp kv of consumer set `set`: groups t = set,
// set + kSets, ... of the split, each from its landed stage, released to the
// producer (8 arrivals: the set's warps) once read.
template <int St, int kSets>
__device__ __forceinline__ void rows_consume(const PipeSplit& p, int n_tiles, int set, int kv, bf16* stages,
                                             uint64_t* full, uint64_t* empty, const uint32_t (&qb)[kHd / 16][2],
                                             float scale_log2, float (&o)[kHd / 16][4], float (&m)[2],
                                             float (&l)[2]) {
  const int lane = threadIdx.x % kWarp, g = lane / 4;
  for (int t = set; t < n_tiles; t += kSets) {
    mbar_wait(&full[t % St], (t / St) & 1);
    bf16* stage = stages + size_t(t % St) * (kRowsStageBytes / sizeof(bf16));
    bf16* k_s = stage + kv * kBoxElems;
    bf16* v_s = stage + (kRowsHeads + kv) * kBoxElems;
    const int kbase = p.begin + t * kBoxKeys;
    zero_stale_v(v_s, kbase, p.end);
    const bool ok[2] = {p.key_ok(kbase + g), p.key_ok(kbase + g + 8)};
    pipe_warp_tile_t<kHd, kHd, true>(qb, k_s, v_s, ok, scale_log2, o, m, l);
    __syncwarp();  // the warp has read its part of the stage: release it
    if (lane == 0) mbar_arrive(&empty[t % St]);
  }
}

// Two consumer sets: set 1's warps hand their register states (per lane: o,
// m, l; l still a per-lane partial) to set 0's warp of the same kv head
// through the drained stages, and set 0 merges them lane by lane (m is the
// same across a head's lanes, so the per-lane partials scale alike).
__device__ __forceinline__ void rows_merge_sets(float* buf, int set, int kv, float (&o)[kHd / 16][4], float (&m)[2],
                                                float (&l)[2]) {
  constexpr int kFields = kHd / 16 * 4 + 4;  // o, then m and l of the lane's two heads
  const int lane = threadIdx.x % kWarp;
  auto at = [&](int f) { return buf + (f * kRowsHeads + kv) * kWarp + lane; };  // conflict-free by lane
  asm volatile("barrier.sync 1, %0;" ::"n"(2 * kRowsHeads * kWarp) : "memory");  // no consumer reads a stage
  if (set == 1) {
#pragma unroll
    for (int d = 0; d < kHd / 16; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) *at(d * 4 + e) = o[d][e];
    *at(kFields - 4) = m[0], *at(kFields - 3) = m[1], *at(kFields - 2) = l[0], *at(kFields - 1) = l[1];
  }
  asm volatile("barrier.sync 1, %0;" ::"n"(2 * kRowsHeads * kWarp) : "memory");
  if (set == 1) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m1 = *at(kFields - 4 + h), l1 = *at(kFields - 2 + h);
    const float mn = fmaxf(m[h], m1);
    if (mn == -INFINITY) continue;  // neither set saw a valid key of this head
    const float c0 = exp2f(m[h] - mn), c1 = exp2f(m1 - mn);
    l[h] = l[h] * c0 + l1 * c1;
    m[h] = mn;
#pragma unroll
    for (int d = 0; d < kHd / 16; ++d) {
      o[d][h] = o[d][h] * c0 + *at(d * 4 + h) * c1;
      o[d][2 + h] = o[d][2 + h] * c0 + *at(d * 4 + 2 + h) * c1;
    }
  }
}

// Grid (splits, sequences); kRowsThreadsOf<kSets> threads: kSets sets of 8
// consumer warps (warp w of a set: kv head w % 8), then the producer warp.
// kC == 1 (variant 21): each warp stores its partial, rows_combine_kernel
// combines them; kSets == 2 (LANTERN_ROWS_SETS=2) splits a split's groups
// between two sets (even / odd), merged before the store. kC > 1 (variant
// 22, kSets == 1): clusters of kC splits merge their states in distributed
// shared memory and the last cluster to finish combines the clusters'
// partials (rows_cluster_finish).
template <int St, int kC, int kSets>
__global__ void __launch_bounds__(kRowsThreadsOf<kSets>, 1)
    decode_rows_kernel(const __grid_constant__ CUtensorMap kv_map, const bf16* q, bf16* out, float* part_o,
                       float2* part_ml, const int32_t* __restrict__ seq_slots,
                       const int32_t* __restrict__ context_lens, const int32_t* __restrict__ block_tables,
                       int block_size, int max_blocks_per_seq, int group, int q_stride, int max_context,
                       float scale_log2) {
  static_assert(kC == 1 || kSets == 1);
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[St], empty[St];
  unsigned char* smem = smem_raw + (1024 - smem_u32(smem_raw) % 1024) % 1024;  // SWIZZLE_128B: 1 KB aligned
  bf16* stages = reinterpret_cast<bf16*>(smem);
  int* table_s = reinterpret_cast<int*>(smem + St * kRowsStageBytes);
  auto stage = [&](int t) { return stages + size_t(t % St) * (kRowsStageBytes / sizeof(bf16)); };

  trigger_dependents();  // the combine kernel (or o_proj) may start launching now
  const int split = blockIdx.x, n_splits = gridDim.x, i = blockIdx.y;
  const int slot = seq_slots[i];
  const int ctx = seq_context(context_lens, i, max_context, max_blocks_per_seq * block_size);
  if (threadIdx.x == 0) {
    for (int s = 0; s < St; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kRowsHeads);  // one arrival per warp of the consuming set
    }
    fence_barrier_init();
  }
  PipeSplit p;
  int n_eff;
  // Ends with a barrier, which also publishes the mbarriers.
  const bool busy = pipe_split_setup<kRowsThreadsOf<kSets>, kHd, kBoxKeys>(
      p, n_eff, split, n_splits, ctx, block_tables + size_t(slot) * max_blocks_per_seq, block_size, kRowsHeads,
      nullptr, table_s);
  if (!busy && (kC == 1 || split / kC >= (n_eff + kC - 1) / kC)) {
    grid_dependency_wait();  // nothing to do (a whole cluster: no peer reads this block), but exit no earlier
    return;                  // than a waiting block would
  }
  float o[kHd / 16][4], m[2], l[2];
  if (!busy) {  // an empty split in a cluster that holds keys: an empty state for the merge
    pipe_empty_state_t<kHd>(o, m, l);
    grid_dependency_wait();
    rows_cluster_finish<kC>(smem, o, m, l, i, group, q_stride, split, n_splits, n_eff, out, part_o, part_ml);
    return;
  }
  const int n_tiles = (p.end - p.begin + kBoxKeys - 1) / kBoxKeys;
  // The newest key's group (written by this step's rope_kv_write), if this split holds it.
  const int newest = ctx >= 1 && ctx - 1 >= p.begin && ctx - 1 < p.end ? (ctx - 1 - p.begin) / kBoxKeys : -1;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, kv = warp % kRowsHeads;
  constexpr int kProducer = kRowsHeads * kSets;  // the producer warp
  const bool producer = warp == kProducer && lane == 0;
  const int n_first = min(St, n_tiles);
  if (producer)
    for (int t = 0; t < n_first; ++t)
      if (t != newest) rows_issue(&kv_map, p, t, stage(t), &full[t]);
  grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
  if (warp == kProducer) {
    if (producer) {
      if (newest >= 0 && newest < n_first) rows_issue(&kv_map, p, newest, stage(newest), &full[newest]);
      for (int t = St; t < n_tiles; ++t) {  // refill each stage once its consumers released it
        mbar_wait(&empty[t % St], (t / St - 1) & 1);
        rows_issue(&kv_map, p, t, stage(t), &full[t % St]);
      }
    }
    if constexpr (kC > 1)  // the cluster's barriers count every thread
      rows_cluster_finish<kC>(smem, o, m, l, i, group, q_stride, split, n_splits, n_eff, out, part_o, part_ml);
    return;  // variant 21: the producer warp takes no part in the output (no block barrier follows)
  }
  uint32_t qb[kHd / 16][2];
  pipe_qt_and_state<kHd>(q + size_t(i) * q_stride + size_t(kv) * group * kHd, group, qb, o, m, l);
  rows_consume<St, kSets>(p, n_tiles, warp / kRowsHeads, kv, stages, full, empty, qb, scale_log2, o, m, l);
  if constexpr (kSets == 2) {
    rows_merge_sets(reinterpret_cast<float*>(smem), warp / kRowsHeads, kv, o, m, l);
    if (warp >= kRowsHeads) return;  // set 1 handed its state to set 0
  }
  if constexpr (kC == 1)
    rows_store(o, m, l, i, kv, group, kRowsHeads * group, q_stride, split, n_splits, n_eff, out, part_o, part_ml);
  else
    rows_cluster_finish<kC>(smem, o, m, l, i, group, q_stride, split, n_splits, n_eff, out, part_o, part_ml);
}

// LANTERN_ROWS_STAGES = 2, 3 (default) or 4: the ring depth, an experiment knob read once.
int rows_stages() {
  static const int v = env_int("LANTERN_ROWS_STAGES", 3);
  return v == 2 || v == 4 ? v : 3;
}

// The splits of the rows kernel's grid for `a` (0: it does not apply): one
// block per SM, whole 16-key groups, the longest split's table entries in
// shared memory, the partials in the workspace.
int rows_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const int max_context = std::max(a.max_context, 1), bs = a.cache.block_size;
  if (a.b >= 24 || !a.one_row_per_seq || !pipe_supports(a) || !tma_supports(a) ||
      a.cache.n_kv_heads != kRowsHeads || max_context <= kRowsOneSplitKeys)
    return 0;
  auto fits = [&](int n) { return split_table_fits(max_context, n, kBoxKeys, bs); };  // whole 16-key groups
  int s = std::clamp(sm_count() / a.b, 1, kRowsMaxSplits);
  while (s < kRowsMaxSplits && !fits(s)) ++s;
  if (!fits(s)) return 0;
  const size_t per_split = split_partial_bytes(a.b, a.n_q_heads, kHd, 1);
  s = int(std::min<size_t>(s, ctx.workspace ? ctx.workspace_bytes / per_split : 0));
  return s >= 2 && fits(s) ? s : 0;
}

// LANTERN_ROWS_SETS = 1 (default) or 2: consumer sets of variant 21's kernel, an experiment knob read once.
int rows_sets() {
  static const int v = env_int("LANTERN_ROWS_SETS", 1);
  return v == 2 ? 2 : 1;
}

// LANTERN_ROWS_CARVEOUT = P (0-100; unset: off), an experiment knob read once:
// in steps where the engine leaves the carveout to the driver (from 2 rows),
// variant 21's two kernels are launched preferring P % shared memory, so an SM
// runs both (and their PDL overlap) under one L1 / shared split (session 40's
// candidate for the batch 2-8 loss; scripts/gpu-rows.sh carveout).
int rows_carveout() {
  static const int v = env_int("LANTERN_ROWS_CARVEOUT", -1);
  return v >= 0 && v <= 100 ? v : -1;
}

// LANTERN_ROWS_CLUSTER = 4 or 8 (default): variant 22's cluster size, an experiment knob read once.
int rows_cluster() {
  static const int v = env_int("LANTERN_ROWS_CLUSTER", 8);
  return v == 4 ? 4 : 8;
}

// How many clusters of kC blocks (one per SM) can be resident at once; queried once per instantiation.
template <int St, int kC>
int rows_active_clusters() {
  static const int n = [] {
    auto* kernel = decode_rows_kernel<St, kC, 1>;
    size_t allowed = 0;
    allow_smem(kernel, kRowsSmem<St>, &allowed);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kC * 64, 1);
    cfg.blockDim = dim3(kRowsThreads);
    cfg.dynamicSmemBytes = kRowsSmem<St>;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kC, attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int count = 0;
    const cudaError_t err = cudaOccupancyMaxActiveClusters(&count, kernel, &cfg);
    if (err != cudaSuccess) (void)cudaGetLastError(), count = 0;
    if (count == 0)
      std::fprintf(stderr, "attention_decode.22: no cluster of %d blocks fits (%s); variant 21's launch runs\n", kC,
                   err != cudaSuccess ? cudaGetErrorString(err) : "0 resident clusters");
    return count;
  }();
  return n;
}

// Variant 22's splits (0: variant 21's launch), where variant 21's kernel
// applies (the caller checked): where every sequence gets a resident cluster, the most
// whole clusters that run in one wave; the clusters' partials in the workspace.
template <int St, int kC>
int rows_cluster_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  // One block per SM: the occupancy query counts two where the whole shared memory is carved out,
  // but the one-row steps' carveout holds one.
  const int clusters = std::min(rows_active_clusters<St, kC>(), sm_count() / kC);
  const int per_seq = std::min(clusters / a.b, kRowsMaxSplits / kC);
  const int s = kC * per_seq;
  if (per_seq < 1 || !split_table_fits(std::max(a.max_context, 1), s, kBoxKeys, a.cache.block_size)) return 0;
  const size_t partials = split_partial_bytes(a.b, a.n_q_heads, kHd, per_seq);
  return ctx.workspace && partials <= ctx.workspace_bytes ? s : 0;
}

// kC == 1: variant 21 (the split kernel, then rows_combine_kernel); else variant 22 (clusters of kC).
template <int St, int kC, int kSets = 1>
void launch_rows(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits) {
  const KvCacheRef& c = a.cache;
  // The step's carveout where it set one, else LANTERN_ROWS_CARVEOUT's (-1: the driver's choice).
  const ScopedLaunchCarveout carveout(launch_carveout() >= 0 ? launch_carveout() : rows_carveout());
  auto* kernel = decode_rows_kernel<St, kC, kSets>;
  static size_t smem_allowed = 0;  // per instantiation
  allow_smem(kernel, kRowsSmem<St>, &smem_allowed);
  // [b][q heads][splits (variant 22: clusters)][head_dim] partial outputs, then their (max, sum).
  auto* part_o = static_cast<float*>(ctx.workspace);
  auto* part_ml = reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * (splits / kC) * kHd);
  const int max_context = std::max(a.max_context, 1), cap = c.max_blocks_per_seq * c.block_size;
  launch_kernel_cluster(true, kC, kernel, dim3(splits, a.b), dim3(kRowsThreadsOf<kSets>), kRowsSmem<St>, ctx.stream,
                        pool_rows_map(c), static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml,
                        a.seq_slots, a.context_lens, c.block_tables, c.block_size, c.max_blocks_per_seq,
                        a.n_q_heads / c.n_kv_heads, a.q_stride, max_context, a.scale * 1.4426950408889634f);
  CUDA_CHECK_LAST("decode_rows_kernel");
  if constexpr (kC == 1) {
    launch_kernel(true, rows_combine_kernel, dim3(a.n_q_heads, a.b), dim3(kCombineThreads), 0, ctx.stream,
                  static_cast<const float*>(part_o), static_cast<const float2*>(part_ml),
                  static_cast<bf16*>(a.out), a.context_lens, max_context, cap, a.n_q_heads, splits, a.q_stride);
    CUDA_CHECK_LAST("rows_combine_kernel");
  }
}

// Variant 22 at St stages, else (no cluster shape fits) variant 21's launch with its `splits`.
template <int St>
void launch_rows_any(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits, bool cluster) {
  if (cluster) {
    const int kc = rows_cluster();
    const int s = kc == 4 ? rows_cluster_splits<St, 4>(a, ctx) : rows_cluster_splits<St, 8>(a, ctx);
    if (s > 0) return kc == 4 ? launch_rows<St, 4>(a, ctx, s) : launch_rows<St, 8>(a, ctx, s);
  }
  if (rows_sets() == 2) return launch_rows<St, 1, 2>(a, ctx, splits);
  launch_rows<St, 1>(a, ctx, splits);
}

void decode_rows(const AttentionDecodeArgs& a, const LaunchCtx& ctx, bool cluster, const char* who) {
  check_decode(a, who);
  if (a.b == 0) return;
  const int splits = rows_splits(a, ctx);
  if (splits == 0) return decode_split_persist_one_t(a, ctx);
  switch (rows_stages()) {
    case 2:
      return launch_rows_any<2>(a, ctx, splits, cluster);
    case 4:
      return launch_rows_any<4>(a, ctx, splits, cluster);
    default:
      return launch_rows_any<3>(a, ctx, splits, cluster);
  }
}
void decode_split_rows(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_rows(a, ctx, false, "attention_decode.split_rows_t");
}
void decode_split_rows_cluster(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_rows(a, ctx, true, "attention_decode.split_rows_cluster_t");
}

}  // namespace

void register_attention_decode_rows_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_split_rows, attention_decode_cost<2>>(
      21, "split_rows_t", Backend::cuda,
      "split_persist_one, but below 24 rows with contexts past 256 keys a block per (sequence, split) "
      "reads whole K/V rows: every kv head of a 16-key group per 32 KB TMA stage (8 consumer warps, "
      "one per kv head, and a producer warp; one block per SM), the splits combined by a second "
      "kernel; 8 kv heads of head_dim 64, GQA groups <= 8, block sizes that are multiples of 16",
      kTestedOnly, decode_split_workspace));  // session 39, H100: batch 1 faster, batch 2-8 slower
  r.add(make_entry<AttentionDecodeArgs, decode_split_rows_cluster, attention_decode_cost<2>>(
      22, "split_rows_cluster_t", Backend::cuda,
      "split_rows_t with no combine kernel: clusters of 8 splits (LANTERN_ROWS_CLUSTER=4: 4) merge "
      "their blocks' states in distributed shared memory, and per kv head the last of a sequence's "
      "clusters to finish combines the clusters' partials; variant 21's launch where no cluster "
      "shape fits (every sequence needs a resident cluster)",
      kTestedOnly, decode_split_workspace));  // session 39, H100: slower than 21 everywhere
}

}  // namespace lantern::kernels
