// attention_decode variant 18 (persistent_tma_t) and 19 (split_persist_t,
// the default since session 16): the persistent form of variant 16's
// TMA-filled ring from 24 rows, and its composition with variant 17 below.
// Shared device pieces: attention_decode_tma.cuh; design notes of the TMA
// ring: the top of attention_decode_tma.cu.
#include <algorithm>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_tma.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

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

// The persistent kernel's arguments, gathered in the kernel for the producer
// and the consumers (passed one by one: as one struct parameter ptxas gave the
// kernel 72 registers instead of 93 -- 5 blocks per SM instead of the 4
// measured in session 16; worth a measurement, not a silent change).
struct PersistParams {
  const bf16* q;
  bf16* out;
  const int32_t* seq_slots;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int block_size, max_blocks_per_seq, n_kv_heads, group, q_stride, max_context, n_items;
  float scale_log2;
};

// Item `item` = (sequence i, kv head kv) as a one-split PipeSplit over its whole
// context, its block-table row read in place (global memory); returns its tiles.
__device__ __forceinline__ int persist_item(const PersistParams& a, int item, PipeSplit& p, int& i, int& kv) {
  i = item / a.n_kv_heads;
  kv = item % a.n_kv_heads;
  const int slot = a.seq_slots[i];
  p.begin = 0;
  p.end = min(min(a.context_lens[i], a.max_context), a.max_blocks_per_seq * a.block_size);
  p.block_size = a.block_size;
  p.bs_shift = PipeSplit::shift_of(a.block_size);
  p.first_blk = 0;
  p.table_s = a.block_tables + size_t(slot) * a.max_blocks_per_seq;
  return max(1, (p.end + 4 * kBoxKeys - 1) / (4 * kBoxKeys));
}

// The producer warp's lane 0: the tiles of this block's items into the ring
// in order, n counting them (stage n % St), a stage refilled once its
// consumers released it (`empty`). The first item's first tiles go out before
// the PDL wait, as in variant 16.
template <int St>
__device__ __forceinline__ void persist_produce(const CUtensorMap* map, const PersistParams& a, bf16* stages,
                                                uint64_t* full, uint64_t* empty) {
  PipeSplit p;
  int i, kv, n = 0;
  for (int item = blockIdx.x; item < a.n_items; item += gridDim.x) {
    const int n_tiles = persist_item(a, item, p, i, kv);
    int t = 0;
    if (n == 0) {
      const int newest_group = p.end >= 1 ? (p.end - 1) / kBoxKeys : -1;
      t = n = min(St, n_tiles);
      tma_first_tiles(map, p, kv, n, newest_group, stages, full);
      grid_dependency_wait();
      tma_newest_group(map, p, kv, n, newest_group, stages, full);
    }
    for (; t < n_tiles; ++t, ++n) {
      if (n >= St) mbar_wait(&empty[n % St], (n / St - 1) & 1);
      tma_tile(map, p, kv, t, stage_at(stages, n % St), &full[n % St]);
    }
  }
}

template <int St>
__device__ __forceinline__ void persist_body(const CUtensorMap& kv_map, const PersistParams& a) {
  using S = TS<St>;
  constexpr int kConsumers = S::kKeyGroups;  // warps 0-3; warp 4 is the producer
  extern __shared__ unsigned char smem_raw[];
  __shared__ float sm_m[kConsumers * kPersistRows], sm_l[kConsumers * kPersistRows];
  __shared__ __align__(16) float sm_o[kConsumers * kPersistRows * kHd];
  __shared__ __align__(8) uint64_t full[St], empty[St];
  unsigned char* smem = smem_raw + (1024 - smem_u32(smem_raw) % 1024) % 1024;  // SWIZZLE_128B: 1 KB aligned
  bf16* stages = reinterpret_cast<bf16*>(smem);

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
  if (warp == kConsumers) {
    if (lane == 0) persist_produce<St>(&kv_map, a, stages, full, empty);
    __syncwarp();
    return;
  }
  grid_dependency_wait();  // q (and the newest K/V rows, through the producer) come from earlier kernels
  PipeSplit p;
  int i, kv, n = 0;  // n: tiles consumed (stage n % St), in the producer's order
  for (int item = blockIdx.x; item < a.n_items; item += gridDim.x) {
    const int n_tiles = persist_item(a, item, p, i, kv);
    uint32_t qb[kHd / 16][2];
    float o[kHd / 16][4], m[2], l[2];
    pipe_qt_and_state<kHd>(a.q + size_t(i) * a.q_stride + size_t(kv) * a.group * kHd, a.group, qb, o, m, l);
    for (int t = 0; t < n_tiles; ++t, ++n) {
      mbar_wait(&full[n % St], (n / St) & 1);
      tma_warp_tile(p, stage_at(stages, n % St) + warp * kWarpKeys * S::kStride, t * S::kTileKeys + warp * kWarpKeys,
                    qb, a.scale_log2, o, m, l);
      __syncwarp();  // the warp has read (and maybe zeroed) its part of the stage: release it
      if (lane == 0) mbar_arrive(&empty[n % St]);
    }
    pipe_store_state_t<kHd, kPersistRows>(o, m, l, a.group, warp, 0, sm_m, sm_l, sm_o);
    consumer_sync();
    finish_split<kHd, kPersistRows, kConsumers, kConsumers * kWarp, false>(
        sm_m, sm_l, sm_o,
        SplitDest{a.out, nullptr, nullptr, nullptr, i, kv, a.n_kv_heads, a.group, a.q_stride, 0, 1, 1});
    consumer_sync();  // the merge buffer is read: the next item may store into it
  }
}

#define LANTERN_PERSIST_PARAMS                                                                           \
  const __grid_constant__ CUtensorMap kv_map, const bf16 *q, bf16 *out, const int32_t *__restrict__ seq_slots, \
      const int32_t *__restrict__ context_lens, const int32_t *__restrict__ block_tables, int block_size,       \
      int max_blocks_per_seq, int n_kv_heads, int group, int q_stride, int max_context, int n_items,           \
      float scale_log2
#define LANTERN_PERSIST_ARGS                                                                                    \
  PersistParams {                                                                                               \
    q, out, seq_slots, context_lens, block_tables, block_size, max_blocks_per_seq, n_kv_heads, group, q_stride, \
        max_context, n_items, scale_log2                                                                        \
  }

// ptxas's own register choice (93; an explicit minimum of 1 block per SM gives 102)...
template <int St>
__global__ void __launch_bounds__(5 * kWarp) decode_persist_kernel(LANTERN_PERSIST_PARAMS) {
  persist_body<St>(kv_map, LANTERN_PERSIST_ARGS);
}
// ... and the 2-stage kernel held to 5 blocks per SM (72 registers; LANTERN_PERSIST_MIN_BLOCKS).
__global__ void __launch_bounds__(5 * kWarp, 5) decode_persist_kernel_5(LANTERN_PERSIST_PARAMS) {
  persist_body<2>(kv_map, LANTERN_PERSIST_ARGS);
}
#undef LANTERN_PERSIST_PARAMS
#undef LANTERN_PERSIST_ARGS

template <int St, int MinB>
constexpr auto persist_kernel() {
  if constexpr (MinB == 5)
    return decode_persist_kernel_5;
  else
    return decode_persist_kernel<St>;
}

// Ring depth of variant 18: LANTERN_PERSIST_STAGES = 2, 3 or 4 (an experiment
// knob, read once). Default 2 (4 blocks per SM, the 93 registers' limit; 3
// and 4 stages keep 3, shared memory's): H200, session 16, three interleaved
// rounds, batch 128 1.518-1.531 ms per step vs 1.526-1.585 (4 stages) and
// 1.537-1.544 (3), batch 256 2.081-2.097 vs 2.088-2.166 and 2.088-2.148;
// bench_kernels b = 256 / ctx 512 77.4 vs 80.6 us. LANTERN_PERSIST_FROM = the
// rows from which it runs (default 24).
int persist_stages() {
  static const int v = env_int("LANTERN_PERSIST_STAGES", 2);
  return v == 3 || v == 4 ? v : 2;
}
int persist_from() {
  static const int v = std::max(1, env_int("LANTERN_PERSIST_FROM", 24));
  return v;
}
// LANTERN_PERSIST_MIN_BLOCKS=5 (2 stages only; an experiment knob, read
// once): the kernel compiled with __launch_bounds__(160, 5), so ptxas keeps
// it within 80 registers and 5 blocks fit an SM (shared memory allows 5 at 2
// stages); default 1: ptxas's own choice (93 registers, 4 blocks per SM).
int persist_min_blocks() {
  static const int v = env_int("LANTERN_PERSIST_MIN_BLOCKS", 1);
  return v == 5 ? 5 : 1;
}

template <int St>
constexpr size_t kPersistSmem = 1024 + St * kStageBytes;  // + alignment slack

// Resident blocks per SM of the St-stage persistent kernel (the driver's carveout choice).
template <int St, int MinB>
int persist_blocks_per_sm() {
  static const int per_sm = [] {
    auto* kernel = persist_kernel<St, MinB>();
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPersistSmem<St>)));
    int r = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r, kernel, 5 * kWarp, kPersistSmem<St>));
    return std::max(r, 1);
  }();
  return per_sm;
}

template <int St, int MinB = 1>
void launch_persist(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  const KvCacheRef& c = a.cache;
  auto* kernel = persist_kernel<St, MinB>();
  constexpr size_t kSmem = kPersistSmem<St>;
  const int n_items = a.b * c.n_kv_heads;
  const int grid = int(std::min<long>(n_items, long(persist_blocks_per_sm<St, MinB>()) * sm_count()));
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
  if (persist_pays(a)) {
    if (St == 2 && persist_min_blocks() == 5) return launch_persist<2, 5>(a, ctx);
    return launch_persist<St>(a, ctx);
  }
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

// Variant 20 (split_persist_one): variant 19 whose split kernel runs a
// context of up to 256 keys as one split, without the combine.
void decode_split_persist_one(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  if (a.b < persist_from()) return decode_tma_split_t(a, ctx, /*one_short=*/true);
  decode_persist_t(a, ctx, "attention_decode.split_persist_one");
}

}  // namespace

void cuda_detail::decode_split_persist_one_t(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_split_persist_one(a, ctx);
}

void register_attention_decode_persist_cuda(Registry& r) {
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
  r.add(make_entry<AttentionDecodeArgs, decode_split_persist_one, attention_decode_cost<2>>(
      20, "split_persist_one", Backend::cuda,
      "split_persist_t, but below 24 rows a context of up to 256 keys is one split of up to 4 tiles "
      "(no combine: its fence, arrival atomic and partials' round trip cost more than the tiles)",
      kPreferred, decode_split_workspace));
}

}  // namespace lantern::kernels
