// attention_prefill variant 3 (flash_pair): variant 2's tensor-core warp step
// (flash_prefill_tile.cuh) with the work cut so that one 512-token prompt fills
// the GPU evenly. Variant 2 gives a block 64 query rows of one head: at 512
// tokens, 256 blocks whose causal work ranges 1..8 key tiles, so the slowest
// SM ran ~2x the mean and every K/V tile was fetched once per q head.
//
// Here a block owns (sequence, kv head, a chunk of kPairHeads q heads of its
// GQA group, a pair of 16-row query tiles): tile T-1-p (heavy) then tile p
// (light), so every block has about the same number of keys to visit (the
// causal triangle folded in half). Warp (part, slot) computes q head
// head0 + slot over key sub-tile `part` of each stage: a stage is S x 64 keys,
// K and V stream through shared memory in a cp.async ring and are
// shared by the kPairHeads heads (one fetch per kv head, not per q head). At
// the end of a tile the S parts' (max, sum, O) are merged through shared memory
// by part 0, which normalises and writes the rows. Only a tile's last stage
// holds the diagonal; a sub-tile wholly above it is skipped.
//
// One 512-token prompt, 32/8 heads: 16 pairs x 8 kv heads = 128 blocks of
// 8 warps (S = 2), each visiting 5 stages. S = 4 (16 warps, 3 stages each at
// 512 tokens) is chosen by LANTERN_PREFILL_SPLITS=4 at head_dim 64.
// Limits: head_dim 64 or 128, group % 4 == 0, 16-byte aligned rows; otherwise
// variant 2 (which itself falls back to the seed).
//
// Registered kTestedOnly: on the H200 it is 10 % faster than variant 2 at 512
// tokens but slower at 128 (32 blocks) and 2048 (one 8-warp block per SM hides
// the warp step's latency worse than variant 2's three 4-warp blocks), and
// `lantern bench` did not show the 512-token gain (docs/performance.md).
#include <cstdlib>
#include <cstring>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/flash_prefill_tile.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kPairHeads = 4;  // q heads per block (one GQA group of the 1B/3B/8B models)
constexpr int kQRows = 16;     // query rows per tile (one warp's mma rows)

// B: K/V stages in the cp.async ring (3 at head_dim 64 with 2 parts: 147 KB, so
// a stage's loads have two stages of compute to land; else 2).
template <int HD, int S, int B = 2>
struct PairLayout {
  static constexpr int kThreads = S * kPairHeads * kWarp;
  static constexpr int kBufs = B;
  static constexpr int kStageKeys = S * kFlashKeys;
  static constexpr int kPitch = FlashTile<HD>::kPitch;
  static constexpr int kQTile = kQRows * kPitch;            // one head's 16 rows
  static constexpr int kKvTile = kStageKeys * kPitch;       // one stage of K (or V)
  static constexpr int kMergeVals = HD / 2 + 4;             // O fragment + m[2] + l[2] per lane
  static constexpr size_t kQBytes = size_t(2) * kPairHeads * kQTile * sizeof(bf16);  // tiles A, B
  static constexpr size_t kKvBytes = size_t(kBufs) * 2 * kKvTile * sizeof(bf16);     // [buf][K,V]
  static constexpr size_t kMergeBytes = size_t(S - 1) * kPairHeads * kMergeVals * kWarp * sizeof(float);
  static constexpr size_t kBytes = kQBytes + kKvBytes + kMergeBytes;
  static_assert(kBytes <= 227 * 1024, "shared memory of one block");
};

// Parts 1..S-1 leave their state in shared memory (value-major: lane-contiguous,
// conflict-free); part 0 rescales each to the common max and adds it.
template <int HD, int S>
__device__ __forceinline__ void merge_parts(FlashRows<HD>& st, float* merge, int part, int slot,
                                            int lane) {
  constexpr int kVals = PairLayout<HD, S>::kMergeVals;
  if (part > 0) {
    float* m = merge + size_t((part - 1) * kPairHeads + slot) * kVals * kWarp + lane;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) m[(d * 4 + e) * kWarp] = st.o[d][e];
    m[(HD / 2 + 0) * kWarp] = st.m[0];
    m[(HD / 2 + 1) * kWarp] = st.m[1];
    m[(HD / 2 + 2) * kWarp] = st.l[0];
    m[(HD / 2 + 3) * kWarp] = st.l[1];
  }
  __syncthreads();
  if (part != 0) return;
#pragma unroll
  for (int p = 1; p < S; ++p) {
    const float* m = merge + size_t((p - 1) * kPairHeads + slot) * kVals * kWarp + lane;
    float c_own[2], c_other[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Part 0 always saw key 0, so st.m is finite; a part that saw only masked
      // keys has m = -inf and weight 0.
      const float mp = m[(HD / 2 + h) * kWarp];
      const float mx = fmaxf(st.m[h], mp);
      c_own[h] = exp2f(st.m[h] - mx);
      c_other[h] = exp2f(mp - mx);
      st.m[h] = mx;
      st.l[h] = st.l[h] * c_own[h] + m[(HD / 2 + 2 + h) * kWarp] * c_other[h];
    }
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st.o[d][e] = st.o[d][e] * c_own[e / 2] + m[(d * 4 + e) * kWarp] * c_other[e / 2];
  }
}

// Stage `s` of a query tile whose keys end at kv_end: K and V rows
// [s * kStageKeys, +kStageKeys) into buffer `buf`, zero-filled past kv_end.
template <int HD, int S>
__device__ __forceinline__ void load_stage(bf16* kv_smem, int buf, const bf16* k_base,
                                           const bf16* v_base, int kv_stride, int s, int kv_end) {
  using L = PairLayout<HD, S>;
  const int kv0 = s * L::kStageKeys;
  bf16* kt = kv_smem + size_t(buf) * 2 * L::kKvTile;
  load_rows_async<HD, L::kThreads>(kt, k_base + size_t(kv0) * kv_stride, kv_stride, L::kStageKeys,
                                   kv_end - kv0);
  load_rows_async<HD, L::kThreads>(kt + L::kKvTile, v_base + size_t(kv0) * kv_stride, kv_stride,
                                   L::kStageKeys, kv_end - kv0);
}

template <int HD, int S, int B, bool kFast>
__global__ void __launch_bounds__(PairLayout<HD, S, B>::kThreads, 1)
    pair_prefill_kernel(const bf16* q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                        bf16* out, const int32_t* __restrict__ seq_starts, int q_stride,
                        int kv_stride, int group, float scale_log2) {
  using L = PairLayout<HD, S, B>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_smem = reinterpret_cast<bf16*>(smem_raw);                     // [tile A/B][slot][16 rows]
  bf16* kv_smem = reinterpret_cast<bf16*>(smem_raw + L::kQBytes);       // [buf][K, V]
  float* merge = reinterpret_cast<float*>(smem_raw + L::kQBytes + L::kKvBytes);

  grid_dependency_wait();  // q, k, v come from the previous kernel (PDL launch)
  const int seq = blockIdx.z, first = seq_starts[seq], len = seq_starts[seq + 1] - first;
  const int n_tiles = (len + kQRows - 1) / kQRows;
  const int tile_b = blockIdx.x, tile_a = n_tiles - 1 - tile_b;  // heavy first, then light
  if (tile_a < tile_b) return;
  const int chunks = group / kPairHeads;
  const int kv_head = blockIdx.y / chunks, head0 = kv_head * group + (blockIdx.y % chunks) * kPairHeads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int slot = warp % kPairHeads, part = warp / kPairHeads;

  const bf16* k_base = k + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const bf16* v_base = v + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const int tiles[2] = {tile_a, tile_b};
  const int n_own = tile_a == tile_b ? 1 : 2;
  int kv_end[2], n_stages[2];
  for (int i = 0; i < 2; ++i) {
    kv_end[i] = min(len, (tiles[i] + 1) * kQRows);  // causal: no key past the tile's last row
    n_stages[i] = i < n_own ? (kv_end[i] + L::kStageKeys - 1) / L::kStageKeys : 0;
  }
  for (int i = 0; i < n_own; ++i) {
    const int q0 = tiles[i] * kQRows;
    for (int h = 0; h < kPairHeads; ++h)
      load_rows_async<HD, L::kThreads>(q_smem + (i * kPairHeads + h) * L::kQTile,
                                       q + size_t(first + q0) * q_stride + size_t(head0 + h) * HD,
                                       q_stride, kQRows, len - q0);
  }
  // Stage g of the block: stage g of tile A, then of tile B.
  const int total = n_stages[0] + n_stages[1];
  auto prefetch = [&](int g) {  // one commit group per stage, empty past the end
    if (g < total) {
      const int i = g < n_stages[0] ? 0 : 1;
      load_stage<HD, S>(kv_smem, g % L::kBufs, k_base, v_base, kv_stride, g - i * n_stages[0],
                        kv_end[i]);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int g = 0; g < L::kBufs - 1; ++g) prefetch(g);

  uint32_t qf[HD / 16][4];
  FlashRows<HD> st;
  int cur = 0, q0 = 0;
  for (int g = 0; g < total; ++g) {
    const int s = g < n_stages[0] ? g : g - n_stages[0];
    if constexpr (B >= 3) {
      // One barrier per stage: after it every warp is done with stage g - 1,
      // whose buffer the prefetch of stage g + B - 1 then refills.
      cp_async_wait<B - 2>();  // stage g (and the Q tiles, in group 0) landed
      __syncthreads();
      prefetch(g + B - 1);
    } else {
      prefetch(g + B - 1);
      cp_async_wait<B - 1>();
      __syncthreads();
    }
    if (s == 0) {  // a new query tile: its Q fragments, a fresh state
      cur = g == 0 ? 0 : 1;
      q0 = tiles[cur] * kQRows;
      load_q_fragments<HD>(qf, q_smem + (cur * kPairHeads + slot) * L::kQTile, lane);
      st.reset();
    }
    const int kv0 = s * L::kStageKeys + part * kFlashKeys;
    const int row_a = q0 + lane / 4;
    if (kv0 < kv_end[cur]) {  // else wholly above the diagonal or past the end
      const bf16* kt = kv_smem + size_t(g % L::kBufs) * 2 * L::kKvTile + part * kFlashKeys * L::kPitch;
      const bool needs_mask = kv0 + kFlashKeys > q0 || kv0 + kFlashKeys > len;
      flash_step<HD, kFast>(st, qf, kt, kt + L::kKvTile, kv0, row_a, row_a + 8, len, needs_mask,
                     scale_log2, lane);
    }
    if (s == n_stages[cur] - 1) {
      merge_parts<HD, S>(st, merge, part, slot, lane);
      // out may alias q: this block alone read these rows of these heads (all of
      // them into shared memory before its first stage).
      if (part == 0)
        flash_store_rows<HD>(st, out + size_t(first) * q_stride + size_t(head0 + slot) * HD, q_stride,
                             row_a, len, lane);
    }
    if constexpr (B < 3) __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }
  cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
}

bool pair_supports(const AttentionPrefillArgs& a) {
  const bool hd_ok = a.head_dim == 64 || a.head_dim == 128;
  const int group = a.n_q_heads / a.n_kv_heads;
  return hd_ok && group % kPairHeads == 0 && a.q_stride % 8 == 0 && a.kv_stride % 8 == 0 &&
         aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.out, 16);
}

// Key parts per block: 2, or LANTERN_PREFILL_SPLITS=4 at head_dim 64 (an
// experiment knob; 4 does not fit shared memory at head_dim 128).
int pair_splits(int head_dim) {
  static const int env = [] {
    const char* e = std::getenv("LANTERN_PREFILL_SPLITS");
    return e && std::strcmp(e, "4") == 0 ? 4 : 2;
  }();
  return head_dim == 64 ? env : 2;
}

// Experiment knobs read once per name: set to 1 in the environment.
bool pair_knob(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "1") == 0;
}

// Programmatic dependent launch (default on; LANTERN_PREFILL_PAIR_PDL=0 turns
// it off: an experiment knob).
bool pair_pdl() {
  static const bool on = [] {
    const char* e = std::getenv("LANTERN_PREFILL_PAIR_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

template <int HD, int S, int B = 2, bool kFast = false>
void launch_pair(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  using L = PairLayout<HD, S, B>;
  static const bool smem_raised = [] {
    CUDA_CHECK(cudaFuncSetAttribute(pair_prefill_kernel<HD, S, B, kFast>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
    return true;
  }();
  (void)smem_raised;
  const int group = a.n_q_heads / a.n_kv_heads;
  const dim3 grid(ceil_div(ceil_div(a.max_seq_len, kQRows), 2), a.n_kv_heads * (group / kPairHeads),
                  a.num_seqs);
  const float log2e = 1.4426950408889634f;
  launch_kernel(pair_pdl(), pair_prefill_kernel<HD, S, B, kFast>, grid, dim3(L::kThreads), L::kBytes, ctx.stream,
                static_cast<const bf16*>(a.q), static_cast<const bf16*>(a.k),
                static_cast<const bf16*>(a.v), static_cast<bf16*>(a.out), a.seq_starts, a.q_stride,
                a.kv_stride, group, a.scale * log2e);
  CUDA_CHECK_LAST("pair_prefill_kernel");
}

void prefill_pair(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  attention_prefill_check(a, "attention_prefill.flash_pair");
  if (a.num_seqs == 0 || a.max_seq_len == 0 || !pair_supports(a))
    return attention_prefill_flash(a, ctx);
  LANTERN_CHECK(a.num_seqs <= 65535 && a.n_q_heads <= 65535 * kPairHeads,
                "attention_prefill.flash_pair: %d sequences x %d heads exceed the grid", a.num_seqs,
                a.n_q_heads);
  if (a.head_dim == 128) return launch_pair<128, 2, 2, true>(a, ctx);
  if (pair_splits(a.head_dim) == 4) return launch_pair<64, 4, 2, true>(a, ctx);
  if (pair_knob("LANTERN_PREFILL_BUFS2")) return launch_pair<64, 2, 2, true>(a, ctx);
  if (pair_knob("LANTERN_PREFILL_EXACT_EXP")) return launch_pair<64, 2, 3, false>(a, ctx);
  return launch_pair<64, 2, 3, true>(a, ctx);
}

}  // namespace

void register_attention_prefill_pair_cuda(Registry& r) {
  r.add(make_entry<AttentionPrefillArgs, prefill_pair, attention_prefill_cost<2>>(
      3, "flash_pair", Backend::cuda,
      "variant 2's mma step over balanced blocks: paired heavy/light 16-row query tiles, the GQA "
      "group's q heads share each K/V tile, keys split over warps and merged; PDL",
      kTestedOnly, attention_prefill_flash_workspace));
}

}  // namespace lantern::kernels
