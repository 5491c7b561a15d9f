// attention_decode: one query token per sequence against its paged K/V cache
// (which already holds the current token). out may alias q.
//
// Variant 1 (seed): one 128-thread block per (sequence, q head). Keys go by in
//   chunks of 128, one per thread: a full q.k dot product per thread, the chunk
//   max and sum by block reductions, then an online-softmax update of the output
//   whose dims are spread over the threads (coalesced V reads). Any head_dim up
//   to 512, any GQA group.
// Variant 2 (split_k): flash-decoding. A block of 4 warps owns one (sequence,
//   kv head, split of the context) and ALL q heads of that GQA group, so each K/V
//   row is read once for the whole group. head_dim/8 lanes share a key (16-byte
//   loads, 8 dims each), several keys per warp and several loads in flight per
//   lane; online softmax in the log2 domain per key slot, merged across the warp
//   (shuffles) and the block (shared memory). With more than one split a second
//   kernel combines the splits' (max, sum, partial output). The split count aims
//   at ~4 blocks per multiprocessor. head_dim 32/64/128/256 and group <= 8; other
//   shapes fall back to variant 1.
// Variant 4 (split_k_ctx): variant 3 whose blocks size their split from the
//   sequence's real context (max(64, ceil(ctx / splits)) keys) instead of
//   max_context / splits, so a short context in an engine configured for long
//   ones still uses every split; launched with programmatic dependent launch.
// Variant 3 (split_k_fused): variant 2 without the second launch: each block
//   bumps an arrival counter per (sequence, kv head) after writing its partial
//   (threadfence-reduction pattern) and the last one combines the splits. The
//   counters are a process-wide device array (zero at load, reset by the
//   combining block): one stream at a time may run this variant.
// Variant 6 (split_k_pipe, attention_decode_pipe.cu) streams K/V through a
//   cp.async shared-memory pipeline and computes on tensor cores; the pieces the
//   split variants share are in attention_decode_split.cuh.
// Both: context_lens[i] is clamped to the block table's capacity (and, for
//   variant 2, to max_context, which sizes the splits); an unallocated block
//   entry (< 0) is skipped. The CPU reference throws on both instead.
#include <algorithm>
#include <cstdlib>

#include "kernels/costs.h"
#include "kernels/cuda/attention_decode_split.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace cuda_detail {

void check_decode(const AttentionDecodeArgs& a, const char* who) {
  const KvCacheRef& c = a.cache;
  LANTERN_CHECK(a.b >= 0 && c.head_dim > 0 && c.n_kv_heads > 0 && a.n_q_heads % c.n_kv_heads == 0,
                "%s: bad shape (b %d, q heads %d, kv heads %d, head_dim %d)", who, a.b, a.n_q_heads,
                c.n_kv_heads, c.head_dim);
  LANTERN_CHECK(c.block_size > 0 && c.max_blocks_per_seq > 0,
                "%s: bad cache shape (block %d, blocks/seq %d)", who, c.block_size,
                c.max_blocks_per_seq);
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * c.head_dim, "%s: q_stride %d < %d heads x %d", who,
                a.q_stride, a.n_q_heads, c.head_dim);
  LANTERN_CHECK(a.b <= 65535 && a.n_q_heads <= 65535, "%s: grid too large (b %d, heads %d)", who,
                a.b, a.n_q_heads);
}

}  // namespace cuda_detail

namespace {
using namespace cuda_detail;

// ------------------------------------------------------------------ variant 1
constexpr int kSeedThreads = 128;
constexpr int kSeedDims = 4;  // output dims per thread: head_dim <= 512

__global__ void __launch_bounds__(kSeedThreads)
    decode_seed_kernel(const bf16* q, bf16* out, const int32_t* __restrict__ seq_slots,
                       const int32_t* __restrict__ context_lens, const bf16* __restrict__ pool,
                       const int32_t* __restrict__ block_tables, int block_size,
                       int max_blocks_per_seq, int n_kv_heads, int head_dim, int group,
                       int q_stride, float scale) {
  extern __shared__ float q_s[];                 // [head_dim]
  __shared__ float p_s[kSeedThreads];            // chunk probabilities
  __shared__ long long row_s[kSeedThreads];      // chunk key rows (element offsets), -1 = skip
  __shared__ float scratch[32];
  const int h = blockIdx.x, i = blockIdx.y, kv_head = h / group;
  const int ctx = min(context_lens[i], max_blocks_per_seq * block_size);
  const int32_t* table = block_tables + size_t(seq_slots[i]) * max_blocks_per_seq;
  const size_t row_elems = size_t(n_kv_heads) * head_dim;
  const size_t half_block = size_t(block_size) * row_elems;
  const bf16* qh = q + size_t(i) * q_stride + size_t(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_s[d] = __bfloat162float(qh[d]);
  __syncthreads();
  float o[kSeedDims] = {0.0f, 0.0f, 0.0f, 0.0f};
  float m = -INFINITY, l = 0.0f;
  for (int c0 = 0; c0 < ctx; c0 += kSeedThreads) {
    const int t = c0 + threadIdx.x;
    float s = -INFINITY;
    long long row = -1;
    if (t < ctx) {
      const int blk = table[t / block_size];
      if (blk >= 0) {
        row = (long long)(size_t(blk) * 2 * half_block + size_t(t % block_size) * row_elems +
                          size_t(kv_head) * head_dim);
        const bf16* kr = pool + row;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q_s[d] * __bfloat162float(kr[d]);
        s = dot * scale;
      }
    }
    row_s[threadIdx.x] = row;
    const float m_new = fmaxf(m, block_max(s, scratch));
    const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    p_s[threadIdx.x] = p;
    l = l * alpha + block_sum(p, scratch);  // barriers: p_s and row_s are visible
    const int nk = min(kSeedThreads, ctx - c0);
#pragma unroll
    for (int e = 0; e < kSeedDims; ++e) {
      const int d = threadIdx.x + e * kSeedThreads;
      if (d < head_dim) {
        float acc = o[e] * alpha;
        for (int j = 0; j < nk; ++j)
          if (row_s[j] >= 0) acc += p_s[j] * __bfloat162float(pool[row_s[j] + half_block + d]);
        o[e] = acc;
      }
    }
    m = m_new;
    __syncthreads();  // p_s / row_s are rewritten by the next chunk
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* oh = out + size_t(i) * q_stride + size_t(h) * head_dim;
#pragma unroll
  for (int e = 0; e < kSeedDims; ++e) {
    const int d = threadIdx.x + e * kSeedThreads;
    if (d < head_dim) oh[d] = __float2bfloat16(o[e] * inv);
  }
}

void decode_seed(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  check_decode(a, "attention_decode.seed");
  const KvCacheRef& c = a.cache;
  LANTERN_CHECK(c.head_dim <= kSeedThreads * kSeedDims,
                "attention_decode.seed: head_dim %d exceeds %d", c.head_dim,
                kSeedThreads * kSeedDims);
  if (a.b == 0) return;
  decode_seed_kernel<<<dim3(a.n_q_heads, a.b), kSeedThreads, c.head_dim * sizeof(float),
                       ctx.stream>>>(
      static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), a.seq_slots, a.context_lens,
      static_cast<const bf16*>(c.pool), c.block_tables, c.block_size, c.max_blocks_per_seq,
      c.n_kv_heads, c.head_dim, a.n_q_heads / c.n_kv_heads, a.q_stride, a.scale);
  CUDA_CHECK_LAST("decode_seed_kernel");
}

// ------------------------------------------------------------------ variant 2
constexpr int kSplitWarps = 4;
constexpr int kSplitThreads = kSplitWarps * kWarp;
// Variant 3: arrival counters per (sequence, kv head), zero at module load and
// reset by the block that combines, so they are zero between launches. One
// stream at a time may run variant 3 (the counters are process-wide).
__device__ unsigned g_split_counters[kMaxSplitCounters];

// kEarly (variant 9): everything that does not depend on the previous kernel
// is loaded BEFORE griddepcontrol.wait -- the step metadata (slot, context
// length; uploaded before the step's first kernel), the block-table entries
// and the first trip's K/V rows, except the newest row (position ctx - 1, the
// only one of a decode row's context that this step's rope_kv_write writes;
// rows before it were written by earlier steps). So after the wait a block
// waits for q and that one row (both in L2), not for three dependent round
// trips (slot -> table entry -> K/V).
// The early form keeps three blocks per multiprocessor, as the others have at
// ~162 registers (unbounded it took 181, two blocks per SM: variant 5's
// one-wave split count then made two waves, +0.26 ms per step at 32 k).
template <int HD, int G, int U, bool kFused, bool kEarly = false>
__global__ void __launch_bounds__(kSplitThreads, kEarly ? 3 : 1)
    decode_split_kernel(const bf16* q, bf16* out, float* part_o, float2* part_ml, const int32_t* __restrict__ seq_slots,
                        const int32_t* __restrict__ context_lens, const bf16* __restrict__ pool,
                        const int32_t* __restrict__ block_tables, int block_size,
                        int max_blocks_per_seq, int n_kv_heads, int group, int q_stride,
                        int max_context, int split_len, float scale_log2, bool early_kv = true) {
  constexpr int kLanesPerKey = HD / 8;
  constexpr int kKeysPerWarp = kWarp / kLanesPerKey;
  constexpr int kKeysPerStep = kKeysPerWarp * kSplitWarps;
  __shared__ float sm_m[kSplitWarps][G], sm_l[kSplitWarps][G];
  __shared__ __align__(16) float sm_o[kSplitWarps][G][HD];

  trigger_dependents();    // a PDL-launched o_proj GEMV may start streaming its weights now
  if constexpr (!kEarly) grid_dependency_wait();  // variant 4 (PDL): q and the cache are written by earlier kernels
  const int split = blockIdx.x, kv_head = blockIdx.y, i = blockIdx.z;
  const int n_splits = gridDim.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int sub = lane % kLanesPerKey, slot = lane / kLanesPerKey;
  const int ctx = min(min(context_lens[i], max_context), max_blocks_per_seq * block_size);
  // split_len <= 0 (variant 4): splits sized from this sequence's real context,
  // so a short context still spreads over every split's block (the grid is sized
  // for max_context once, which keeps it fixed for graph capture).
  const int len = split_len > 0 ? split_len : max(kMinSplitKeys, (ctx + n_splits - 1) / n_splits);
  const int begin = split * len, end = min(ctx, begin + len);
  // Variant 4 with the fused combine: only the splits that hold keys take part
  // (n_eff of them; every block computes the same number from ctx). The others
  // exit at once -- no partials written, no arrival counted -- and a context
  // that fits one split is written directly, with no combine at all.
  const bool skip_empty = kFused && split_len <= 0;
  const int n_eff = skip_empty ? max(1, (ctx + len - 1) / len) : n_splits;
  if (split >= n_eff) return;
  const int32_t* table = block_tables + size_t(seq_slots[i]) * max_blocks_per_seq;
  const size_t row_elems = size_t(n_kv_heads) * HD;
  const size_t half_block = size_t(block_size) * row_elems;
  const bf16* kv_base = pool + size_t(kv_head) * HD + sub * 8;

  // Warp-uniform trip count: every lane runs every iteration (shuffles inside).
  // The block-table entries of the next iteration are loaded while this one
  // computes, so a K/V load waits for one memory round trip, not two.
  auto table_entry = [&](int t) { return t < end ? table[t / block_size] : -1; };
  int blk_next[U], blk_cur[U];
  uint4 kr[U], vr[U];
  bool valid[U];
  // Key t's K and V pieces (cache block blk) into slot u.
  auto load_row = [&](int u, int t, int blk) {
    const bf16* row = kv_base + size_t(blk) * 2 * half_block + size_t(t % block_size) * row_elems;
    kr[u] = *reinterpret_cast<const uint4*>(row);
    vr[u] = *reinterpret_cast<const uint4*>(row + half_block);
  };
  // One trip's K/V rows into kr/vr (`skip_newest`: not the row at ctx - 1).
  auto load_trip = [&](int base, bool skip_newest) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = base + slot + u * kKeysPerStep;
      blk_cur[u] = blk_next[u];
      valid[u] = t < end && blk_cur[u] >= 0;
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      if (valid[u] && !(skip_newest && t == ctx - 1)) load_row(u, t, blk_cur[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) blk_next[u] = table_entry(base + kKeysPerStep * U + slot + u * kKeysPerStep);
  };
  const int first = begin + warp * kKeysPerWarp;
#pragma unroll
  for (int u = 0; u < U; ++u) blk_next[u] = table_entry(first + slot + u * kKeysPerStep);
  if constexpr (kEarly) {
    if (first < end && early_kv) load_trip(first, true);
    grid_dependency_wait();  // q and the newest K/V row are written by earlier kernels
    if (first < end && !early_kv) load_trip(first, false);  // diagnosis: metadata early, K/V after
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = first + slot + u * kKeysPerStep;
      if (first < end && valid[u] && t == ctx - 1) load_row(u, t, blk_cur[u]);
    }
  }

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < group) {
      unpack8(*reinterpret_cast<const uint4*>(q + size_t(i) * q_stride +
                                              size_t(kv_head * group + g) * HD + sub * 8),
              qf[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[g][e] *= scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[g][e] = 0.0f;
    }
  }
  float m[G], l[G], o[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.0f;
  }

  for (int base = first; base < end; base += kKeysPerStep * U) {
    if (!kEarly || base != first) load_trip(base, false);
    float s[G][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack8(kr[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += qf[g][e] * kf[e];
#pragma unroll
        for (int off = 1; off < kLanesPerKey; off <<= 1) dot += __shfl_xor_sync(kFullMask, dot, off);
        s[g][u] = valid[u] ? dot : -INFINITY;
      }
    }
    float vf[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u) unpack8(vr[u], vf[u]);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[g][u]);
      if (mx == -INFINITY) continue;  // nothing valid yet for this key slot
      const float corr = exp2f(m[g] - mx);
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = exp2f(s[g][u] - mx);  // -inf -> 0
        l[g] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] += p * vf[u][e];
      }
      m[g] = mx;
    }
  }

  // Merge the key slots of the warp (lanes with the same `sub`).
#pragma unroll
  for (int off = kLanesPerKey; off < kWarp; off <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float m_b = __shfl_xor_sync(kFullMask, m[g], off);
      const float l_b = __shfl_xor_sync(kFullMask, l[g], off);
      float o_b[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o_b[e] = __shfl_xor_sync(kFullMask, o[g][e], off);
      merge_state(m[g], l[g], o[g], m_b, l_b, o_b);
    }
  }
  if (slot == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < 8; ++e) sm_o[warp][g][sub * 8 + e] = o[g][e];
      if (sub == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();
  finish_split<HD, G, kSplitWarps, kSplitThreads, kFused>(&sm_m[0][0], &sm_l[0][0], &sm_o[0][0][0],
                                           SplitDest{out, part_o, part_ml, g_split_counters, i, kv_head,
                                                     n_kv_heads, group, q_stride, split, n_splits, n_eff});
}

// One block per (head, sequence): warp 0 turns the splits' (max, sum) into
// weights in shared memory, then one thread per dim sums the partial outputs
// (independent, coalesced loads; unrolled).
__global__ void decode_combine_kernel(const float* __restrict__ part_o,
                                      const float2* __restrict__ part_ml, bf16* out, int n_q_heads,
                                      int head_dim, int n_splits, int q_stride) {
  __shared__ float weight_s[kMaxSplits];
  __shared__ float inv_sum;
  const int head = blockIdx.x, i = blockIdx.y;
  const size_t idx0 = (size_t(i) * n_q_heads + head) * n_splits;
  if (threadIdx.x < kWarp) {
    const float l = split_weights(part_ml + idx0, n_splits, weight_s);
    if (threadIdx.x == 0) inv_sum = l > 0.0f ? 1.0f / l : 0.0f;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < n_splits; ++s) acc += part_o[(idx0 + s) * head_dim + d] * weight_s[s];
    out[size_t(i) * q_stride + size_t(head) * head_dim + d] = __float2bfloat16(acc * inv_sum);
  }
}

int pow2_group(int group) {
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : group <= 8 ? 8 : 0;
}

bool split_supports(const AttentionDecodeArgs& a) {
  const int hd = a.cache.head_dim;
  return (hd == 32 || hd == 64 || hd == 128 || hd == 256) &&
         pow2_group(a.n_q_heads / a.cache.n_kv_heads) > 0 && a.q_stride % 8 == 0 &&
         aligned(a.q, 16) && aligned(a.out, 16) && aligned(a.cache.pool, 16);
}

}  // namespace

namespace cuda_detail {

size_t split_partial_bytes(int b, int n_q_heads, int head_dim, int splits) {
  return size_t(b) * n_q_heads * splits * (head_dim * sizeof(float) + sizeof(float2));
}

int max_splits_for(int max_context) {
  return std::clamp(ceil_div(std::max(max_context, 1), kMinSplitKeys), 1, kMaxSplits);
}

size_t decode_split_workspace(const WorkspaceShape& s) {
  return split_partial_bytes(s.max_seqs, s.n_q_heads, s.head_dim, max_splits_for(s.max_context));
}

}  // namespace cuda_detail

namespace {

// LANTERN_EARLY_KV=0 (read once; a diagnosis knob for variant 9's
// nondeterminism, docs/performance.md session 7): the early kernel still reads
// the metadata and block-table entries before the wait, the K/V rows after.
bool early_kv_loads() {
  static const bool on = [] {
    const char* env = std::getenv("LANTERN_EARLY_KV");
    return !(env && env[0] == '0');
  }();
  return on;
}

// How a split launch runs: `fused` combine in the last block, `pdl` launch,
// `early` loads before the dependency wait (variant 9; needs fused).
struct SplitMode {
  bool fused = false, pdl = false, early = false;
};

template <int HD, int G>
void launch_split(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits, int split_len,
                  float* part_o, float2* part_ml, SplitMode mode) {
  constexpr int U = G >= 8 ? 2 : 4;  // loads in flight per lane, bounded by registers
  const KvCacheRef& c = a.cache;
  const dim3 grid(splits, c.n_kv_heads, a.b);
  auto kernel = mode.early   ? decode_split_kernel<HD, G, U, true, true>
                : mode.fused ? decode_split_kernel<HD, G, U, true>
                             : decode_split_kernel<HD, G, U, false>;
  const bool pdl = mode.pdl;
  launch_kernel(pdl, kernel, grid, dim3(kSplitThreads), 0, ctx.stream,
                static_cast<const bf16*>(a.q), static_cast<bf16*>(a.out), part_o, part_ml,
                a.seq_slots, a.context_lens, static_cast<const bf16*>(c.pool), c.block_tables,
                c.block_size, c.max_blocks_per_seq, c.n_kv_heads, a.n_q_heads / c.n_kv_heads,
                a.q_stride, a.max_context, split_len, a.scale * 1.4426950408889634f, early_kv_loads());
  CUDA_CHECK_LAST("decode_split_kernel");
}

template <int HD>
void dispatch_group(const AttentionDecodeArgs& a, const LaunchCtx& ctx, int splits, int split_len,
                    float* part_o, float2* part_ml, SplitMode mode) {
  switch (pow2_group(a.n_q_heads / a.cache.n_kv_heads)) {
    case 1:
      return launch_split<HD, 1>(a, ctx, splits, split_len, part_o, part_ml, mode);
    case 2:
      return launch_split<HD, 2>(a, ctx, splits, split_len, part_o, part_ml, mode);
    case 4:
      return launch_split<HD, 4>(a, ctx, splits, split_len, part_o, part_ml, mode);
    default:
      return launch_split<HD, 8>(a, ctx, splits, split_len, part_o, part_ml, mode);
  }
}

// Blocks of the fused split kernel one multiprocessor holds at once (registers
// bound it: ~160 per thread), asked once per instantiation.
template <int HD, int G>
int resident_per_sm() {
  static const int n = [] {
    constexpr int U = G >= 8 ? 2 : 4;
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, decode_split_kernel<HD, G, U, true>, kSplitThreads, 0));
    return std::max(blocks, 1);
  }();
  return n;
}
template <int HD>
int resident_per_sm_group(int group) {
  switch (pow2_group(group)) {
    case 1: return resident_per_sm<HD, 1>();
    case 2: return resident_per_sm<HD, 2>();
    case 4: return resident_per_sm<HD, 4>();
    default: return resident_per_sm<HD, 8>();
  }
}
int resident_split_blocks(int hd, int group) {
  const int per_sm = hd == 32 ? resident_per_sm_group<32>(group)
                     : hd == 64 ? resident_per_sm_group<64>(group)
                     : hd == 128 ? resident_per_sm_group<128>(group)
                                 : resident_per_sm_group<256>(group);
  return per_sm * sm_count();
}

}  // namespace

namespace cuda_detail {
// Variant 5's split count: while at least two splits of every (sequence, kv
// head) fit in one wave of resident blocks, as many as fit (b = 1: 396 / 8 = 49
// splits, b = 8: 6); otherwise variant 4's count (4 blocks per SM), which is
// what was measured at b = 64 and 256 (docs/performance.md, session 5).
int wave_splits(long work, long resident, long four_per_sm) {
  const long fit = resident / work;
  return int(fit >= 2 ? fit : four_per_sm);
}

}  // namespace cuda_detail

namespace {

// Variants 2-5: `fused` combines the splits in the split kernel's last block
// instead of a second launch; `device_sized` (variants 4, 5) has each sequence
// size its splits from its real context and launches with PDL; `one_wave`
// (variant 5) sizes the grid to one wave of the blocks the GPU holds at once
// instead of 4 per multiprocessor (which the ~160 registers per thread cap at 3:
// at batch 1 and long contexts a second, mostly idle wave).
void decode_split_impl(const AttentionDecodeArgs& a, const LaunchCtx& ctx, bool fused,
                       bool device_sized = false, bool one_wave = false, bool early = false) {
  check_decode(a, early          ? "attention_decode.split_k_early"
                  : one_wave     ? "attention_decode.split_k_wave"
                  : device_sized ? "attention_decode.split_k_ctx"
                  : fused        ? "attention_decode.split_k_fused"
                                 : "attention_decode.split_k");
  if (a.b == 0) return;
  if (!split_supports(a)) return decode_seed(a, ctx);
  const KvCacheRef& c = a.cache;
  const int hd = c.head_dim;
  const int max_context = std::max(a.max_context, 1);
  // Enough blocks for ~4 per multiprocessor, splits no shorter than 64 keys,
  // and no more than the workspace holds.
  const long work = long(a.b) * c.n_kv_heads;
  const int four_per_sm = ceil_div(4 * sm_count(), work);
  int splits = one_wave ? wave_splits(work, resident_split_blocks(hd, a.n_q_heads / c.n_kv_heads), four_per_sm)
                        : four_per_sm;
  splits = std::min(splits, max_splits_for(max_context));
  const size_t per_split = split_partial_bytes(a.b, a.n_q_heads, hd, 1);
  if (splits > 1) splits = int(std::min<size_t>(splits, ctx.workspace ? ctx.workspace_bytes / per_split : 0));
  splits = std::max(splits, 1);
  const int split_len = ceil_div(max_context, splits);
  splits = ceil_div(max_context, split_len);
  if (fused && long(a.b) * c.n_kv_heads > kMaxSplitCounters) fused = false;
  // The separate combine kernel is launched without PDL, so it needs nothing more.
  // [b][heads][splits][hd] partial outputs (16-byte aligned), then their (max, sum).
  auto* part_o = static_cast<float*>(ctx.workspace);
  auto* part_ml = reinterpret_cast<float2*>(part_o + size_t(a.b) * a.n_q_heads * splits * hd);
  const int len_arg = device_sized ? -1 : split_len;  // -1: sized on the device
  // Early loads read the metadata before the wait, which only a device-sized
  // fused launch (PDL, graph-safe) is written for.
  const SplitMode mode{fused, device_sized, early && fused && device_sized};
  switch (hd) {
    case 32:
      dispatch_group<32>(a, ctx, splits, len_arg, part_o, part_ml, mode);
      break;
    case 64:
      dispatch_group<64>(a, ctx, splits, len_arg, part_o, part_ml, mode);
      break;
    case 128:
      dispatch_group<128>(a, ctx, splits, len_arg, part_o, part_ml, mode);
      break;
    default:
      dispatch_group<256>(a, ctx, splits, len_arg, part_o, part_ml, mode);
      break;
  }
  if (splits > 1 && !fused) {
    decode_combine_kernel<<<dim3(a.n_q_heads, a.b), std::clamp(hd, kWarp, 128), 0, ctx.stream>>>(
        part_o, part_ml, static_cast<bf16*>(a.out), a.n_q_heads, hd, splits, a.q_stride);
    CUDA_CHECK_LAST("decode_combine_kernel");
  }
}

void decode_split(const AttentionDecodeArgs& a, const LaunchCtx& ctx) { decode_split_impl(a, ctx, false); }
void decode_split_fused(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_split_impl(a, ctx, true);
}
void decode_split_ctx(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_split_impl(a, ctx, true, true);
}
}  // namespace

void cuda_detail::decode_split_wave(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_split_impl(a, ctx, true, true, true);
}
void cuda_detail::decode_split_early(const AttentionDecodeArgs& a, const LaunchCtx& ctx) {
  decode_split_impl(a, ctx, true, true, true, true);
}

void register_attention_decode_cuda(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, decode_seed, attention_decode_cost<2>>(
      1, "seed", Backend::cuda,
      "one block per (sequence, q head): 128-key chunks, block reductions, online softmax",
      kTestedOnly));
  r.add(make_entry<AttentionDecodeArgs, decode_split, attention_decode_cost<2>>(
      2, "split_k", Backend::cuda,
      "flash-decoding: a block per (seq, kv head, split) serves the whole GQA group, 16-byte "
      "loads, split combine kernel",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_split_fused, attention_decode_cost<2>>(
      3, "split_k_fused", Backend::cuda,
      "split_k whose last-arriving block per (seq, kv head) combines the splits: one launch; "
      "one stream at a time",
      kTestedOnly, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, decode_split_ctx, attention_decode_cost<2>>(
      4, "split_k_ctx", Backend::cuda,
      "split_k_fused with each sequence's splits sized from its real context on the device (the "
      "grid stays sized for max_context) and programmatic dependent launch",
      kPreferred, decode_split_workspace));
  r.add(make_entry<AttentionDecodeArgs, cuda_detail::decode_split_wave, attention_decode_cost<2>>(
      5, "split_k_wave", Backend::cuda,
      "split_k_ctx with the grid sized to one wave of resident blocks (occupancy query) "
      "while >= 2 splits per (sequence, kv head) fit, instead of 4 blocks per SM",
      kPreferred, decode_split_workspace));
}

}  // namespace lantern::kernels
