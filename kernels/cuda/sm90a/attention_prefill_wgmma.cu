// attention_prefill variant 4 (wg_flash): causal GQA flash attention over
// whole prompts on Hopper's warpgroup MMA, built for sm_90a (its own object
// library, kernels/CMakeLists.txt).
//
// Why (docs/performance.md, "attention_prefill.3 flash_pair" and session 22):
// variants 2 and 3 run mma.m16n8k16 warp steps of ~1100 instructions per 64
// keys (ldmatrix, 64 mma.sync, the softmax) at 8 warps per SM; ncu showed the
// tensor pipe active 15-20 % and the step latency-bound on instruction issue:
// 13.6-14.2 us per layer for a 512-token prompt, where the FLOPs take ~2 us.
// Here the two products of a 64-key step are 4 + 4 wgmma instructions per
// warpgroup, read from shared memory the copy engine filled:
//  - a block owns 64 query rows of one (sequence, q head): its Q tile
//    (64 rows x head_dim 64, one 128-byte-swizzled box) and, per consumer
//    warpgroup, a 3-stage ring of (K, V) tiles of 64 keys, each filled by
//    cp.async.bulk.tensor from the activations (rows past the last are
//    zero-filled), completing on the stage's mbarrier;
//  - the block's key tiles are split between its two warpgroups (even and odd
//    tiles), so the heaviest (diagonal-most) query tile waits for half its keys
//    in a row; the partial states (row max, row sum, O) are merged in
//    warpgroup order at the end (deterministic). LANTERN_PREFILL_WGS=4 runs
//    four warpgroups per block (one block per SM): measured slower at every
//    length (docs/performance.md, session 22), kept for experiments;
//  - S = Q K^T: wgmma.m64n64k16, both operands K-major from shared memory;
//    online softmax in the log2 domain on the accumulators (the causal mask
//    only on the diagonal tile); P rounded to bf16 straight from the
//    accumulator registers into the A fragments of O += P V, whose B (V, key
//    rows of 64 dims) is read N-major (imm-trans-b);
//  - PDL: the loads wait for the previous kernel (griddepcontrol.wait).
// Same arithmetic as variant 2 up to the order of the MMAs' sums and the
// merge (tested against the CPU reference and against variant 2).
//
// attention_prefill variant 5 (wg_flash_pipe; tested only): the same kernel
// with each warpgroup's key tiles pipelined as FA3 does within a warpgroup --
// S of tile i is issued together with O += P V of tile i - 1, tile i's softmax
// runs while that P V is in flight, and O takes tile i's correction once it
// has completed (skipped when no row of the warp moved its max). The
// operations on O are variant 4's in the same order: bit-identical (tested).
// P is packed after the P V that reads the previous P has completed, so no
// register an in-flight wgmma reads is redefined (ptxas would serialise the
// MMAs otherwise, C7513). On the H200 it is level with variant 4 (13.1 vs 13.0
// us at 512 tokens, 68.3-68.9 vs 69.1 at 2048, 716-721 vs 736 at 8192;
// prefill steps level): at these lengths the tile chain is bounded by the
// SM's shared issue, MUFU and tensor throughput across its four warpgroups,
// not by one warpgroup's latency (docs/performance.md, session 32).
// Fits: head_dim 64, q/kv strides multiples of 8, 16-byte aligned q, k, v,
// out, host_seq_starts (the maps' row count), an sm_90 GPU; else variant 2.
#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/flash_prefill_tile.cuh"
#include "kernels/cuda/prefill_order.h"
#include "kernels/cuda/sm90a/sm90a.h"
#include "kernels/cuda/sm90a/wgmma.cuh"
#include "kernels/cuda/tma_common.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

// Phase stamps for scripts/probe/af_phases.cu (that probe includes this file
// with LANTERN_AF_PROBE defined; in the library build they compile to nothing):
// %globaltimer per block (thread 0 of warpgroup 0 unless said) at entry, after
// the PDL wait and the sequence's bounds, after the barrier init, at Q full,
// at the first key tile full, after warpgroup 0's and warpgroup 1's last tile
// (their thread 0), after the merge barrier and at exit; then the SM id and
// the block's key tiles.
#ifdef LANTERN_AF_PROBE
__device__ unsigned long long g_af_probe[4096][12];
#define AF_STAMP(slot)                                                                            \
  do {                                                                                           \
    unsigned long long t_;                                                                       \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                       \
    const unsigned b_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);          \
    if (b_ < 4096) g_af_probe[b_][slot] = t_;                                                   \
  } while (0)
#define AF_PUT(slot, v)                                                                           \
  do {                                                                                           \
    const unsigned b_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);          \
    if (b_ < 4096) g_af_probe[b_][slot] = (v);                                                  \
  } while (0)
#else
#define AF_STAMP(slot) \
  do {                 \
  } while (0)
#define AF_PUT(slot, v) \
  do {                  \
  } while (0)
#endif

constexpr int kAfHd = 64;                        // head_dim
constexpr int kAfRows = 64;                      // query rows per block
constexpr int kAfKeys = 64;                      // keys per tile
constexpr int kAfStages = 3;                     // ring stages per warpgroup
constexpr unsigned kAfTileBytes = kAfKeys * kAfHd * 2;  // 8 KB: one box
constexpr unsigned kAfStageBytes = 2 * kAfTileBytes;    // K, then V
constexpr size_t kAfRingBytes = size_t(kAfStages) * kAfStageBytes;
// NW consumer warpgroups split a block's key tiles (tile j to warpgroup j % NW):
// 2 (two blocks per SM) or 4 (one block per SM, half the heaviest block's chain).
template <int NW>
struct AfShape {
  static constexpr int kThreads = NW * 128;
  static constexpr size_t kBarOffset = kAfTileBytes + NW * kAfRingBytes;  // after Q and the rings
  static constexpr size_t kSmemBytes = kBarOffset + (1 + NW * kAfStages) * sizeof(uint64_t) + 1024;
};

__device__ __forceinline__ void wg_bar_sync(int wg) {  // the 128 threads of one warpgroup
  asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
}

// The running state of a thread's two query rows (row g and g + 8 of its
// warp's 16): O accumulators in the m64n64 layout (acc 4 n + e: dims 8 n +
// 2 (lane % 4) + (e & 1), row + 8 for e >= 2), the row max in scaled log2
// units and this thread's partial row sums.
struct AfRows {
  float o[32];
  float m[2], l[2];
};

// The pieces of one tile of 64 keys at key index kv0 (S = Q K^T, mask, online
// softmax, O += P V), so that variant 5 can issue them in another order.
// S = Q K^T as one committed wgmma group (not waited for).
__device__ __forceinline__ void af_issue_s(float (&s)[32], unsigned q_at, unsigned k_at) {
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.0f;
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < kAfHd / 16; ++kk) wgmma_bf16<64>(s, sw128_desc(q_at + kk * 32), sw128_desc(k_at + kk * 32));
  wg_commit();
}

// The causal / length mask and the online softmax on a finished S: the row
// state's max and sum move on, s becomes the unnormalised probabilities and
// corr the factor O must take before this tile's P V is added. O is not touched.
__device__ __forceinline__ void af_softmax(AfRows& st, float (&s)[32], float (&corr)[2], int kv0, int row_a,
                                           int len, bool needs_mask, float scale_log2, int lane) {
  const int t = lane % 4;
  if (needs_mask) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kv0 + 8 * n + 2 * t + (e & 1), row = row_a + (e >> 1) * 8;
        if (key > row || key >= len) s[4 * n + e] = -INFINITY;
      }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // a row's 64 keys: 16 per thread, the 4 threads of a quad
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(st.m[h], mx * scale_log2);  // scale_log2 > 0
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    corr[h] = fast_exp2(st.m[h] - m_use);
    st.m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[4 * n + e] = fast_exp2(fmaf(s[4 * n + e], scale_log2, -m_use));
        sum += s[4 * n + e];
      }
    st.l[h] = st.l[h] * corr[h] + sum;
  }
}

// O *= corr. kSkip (variant 5): skipped when no row of the warp moved its max
// (corr is exactly 1 then, as exp2(0) is: the product would change nothing) --
// the common case once a row has met its largest score; a warp vote per tile
// otherwise.
template <bool kSkip>
__device__ __forceinline__ void af_rescale(float (&o)[32], const float (&corr)[2]) {
  if (kSkip && __all_sync(kFullMask, corr[0] == 1.0f && corr[1] == 1.0f)) return;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    o[4 * n] *= corr[0];
    o[4 * n + 1] *= corr[0];
    o[4 * n + 2] *= corr[1];
    o[4 * n + 3] *= corr[1];
  }
}

// P as the A fragments of the k16 steps: keys 16 kk .. 16 kk + 15 are the
// accumulators of n-tiles 2 kk and 2 kk + 1.
__device__ __forceinline__ void af_pack(uint32_t (&p)[4][4], const float (&s)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    p[kk][0] = pack_bf16x2(s[8 * kk], s[8 * kk + 1]);
    p[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// O += P V issued (no fence of its own: the caller's wg_fence covers it).
__device__ __forceinline__ void af_issue_pv(float (&o)[32], const uint32_t (&p)[4][4], unsigned v_at) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_bf16_rs_nmajor64(o, p[kk], sw128_desc(v_at + kk * 16 * 128));
}

template <int R>
__device__ __forceinline__ void fence_fragments(uint32_t (&p)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
}

// Variant 4's tile: every piece waited for before the next.
__device__ __forceinline__ void af_step(AfRows& st, unsigned q_at, unsigned k_at, unsigned v_at, int kv0, int row_a,
                                        int len, bool needs_mask, float scale_log2, int lane) {
  float s[32], corr[2];
  af_issue_s(s, q_at, k_at);
  wg_wait_all();
  fence_operands(s);
  af_softmax(st, s, corr, kv0, row_a, len, needs_mask, scale_log2, lane);
  af_rescale<false>(st.o, corr);
  uint32_t p[4][4];
  af_pack(p, s);
  fence_operands(st.o);
  wg_fence();
  af_issue_pv(st.o, p, v_at);
  wg_commit();
  wg_wait_all();
  fence_operands(st.o);
}

// A warpgroup's final state into `x` (its drained ring), in register order:
// the same thread of warpgroup 0 holds the same rows and dims.
__device__ __forceinline__ void af_leave_state(const AfRows& st, float* x, int wtid) {
#pragma unroll
  for (int i = 0; i < 32; ++i) x[i * 128 + wtid] = st.o[i];
  x[32 * 128 + wtid] = st.m[0];
  x[33 * 128 + wtid] = st.m[1];
  x[34 * 128 + wtid] = st.l[0];
  x[35 * 128 + wtid] = st.l[1];
}

// Warpgroup 0: its state merged with warpgroups 1 .. NW - 1's (left at
// rings + w * kAfRingBytes) in warpgroup order (deterministic), normalised
// and stored as this thread's two rows (row_a, row_a + 8 of the sequence
// starting at row `first`) of q head `head`. Rows at or past len are not written.
template <int NW>
__device__ __forceinline__ void af_merge_store(const AfRows& st, const unsigned char* rings, int wtid, int lane,
                                               int row_a, int len, bf16* out, int first, int head, int q_stride) {
  auto peer = [&](int w) { return reinterpret_cast<const float*>(rings + w * kAfRingBytes); };
  const int t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m = st.m[h];
#pragma unroll
    for (int w = 1; w < NW; ++w) m = fmaxf(m, peer(w)[(32 + h) * 128 + wtid]);
    const float m_use = m == -INFINITY ? 0.0f : m;
    float c[NW];
    c[0] = fast_exp2(st.m[h] - m_use);
    float l = st.l[h] * c[0];
#pragma unroll
    for (int w = 1; w < NW; ++w) {
      c[w] = fast_exp2(peer(w)[(32 + h) * 128 + wtid] - m_use);
      l += peer(w)[(34 + h) * 128 + wtid] * c[w];
    }
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = row_a + 8 * h;
    if (row < len) {
      bf16* p = out + size_t(first + row) * q_stride + size_t(head) * kAfHd + 2 * t;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int i0 = 4 * n + 2 * h;
        float o0 = st.o[i0] * c[0], o1 = st.o[i0 + 1] * c[0];
#pragma unroll
        for (int w = 1; w < NW; ++w) {
          o0 += peer(w)[i0 * 128 + wtid] * c[w];
          o1 += peer(w)[(i0 + 1) * 128 + wtid] * c[w];
        }
        *reinterpret_cast<__nv_bfloat162*>(p + 8 * n) = __floats2bfloat162_rn(o0 * inv, o1 * inv);
      }
    }
  }
}

template <int NW, bool kPipe>
__global__ void __launch_bounds__(NW * 128, 4 / NW)
    attention_prefill_wg_kernel(const __grid_constant__ CUtensorMap q_map,  // [rows, q heads x 64], 64 x 64 boxes
                                const __grid_constant__ CUtensorMap k_map,  // [rows, kv heads x 64]
                                const __grid_constant__ CUtensorMap v_map,  // [rows, kv heads x 64]
                                bf16* out, const int32_t* __restrict__ seq_starts, int q_stride, int group,
                                float scale_log2, int balance_sms) {
  extern __shared__ unsigned char af_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(af_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + AfShape<NW>::kBarOffset);
  uint64_t* full = q_full + 1;  // [warpgroup][stage]
  const int seq = blockIdx.z;
  // The block's query tile (counted from the last: heaviest first) and q head.
  // balance_sms (one sequence, one wave): linear blocks L < balance_sms take
  // the heaviest tiles in order, the others the lightest from L = balance_sms
  // on, so blocks L and L + balance_sms -- on one SM when the scheduler
  // places a wave's second blocks as it placed its first -- carry about equal
  // key tiles together; else tile x from the last, head y.
  int from_last = blockIdx.x, head = blockIdx.y;
  if (balance_sms > 0) {  // kernels/cuda/prefill_order.h
    const int heads = gridDim.y;
    const int rank = prefill_order::balanced_rank(blockIdx.x + gridDim.x * blockIdx.y, gridDim.x * heads, balance_sms);
    from_last = rank / heads, head = rank % heads;
  }
  const int kv_head = head / group;
  if (threadIdx.x == 0) AF_STAMP(0);
  grid_dependency_wait();  // seq_starts, q, k and v come from earlier kernels
  trigger_dependents();
  const int first = seq_starts[seq], len = seq_starts[seq + 1] - first;
  const int q0 = (gridDim.x - 1 - from_last) * kAfRows;  // heaviest (last) tiles start first
  if (threadIdx.x == 0) AF_STAMP(1);
  if (q0 >= len) return;
  const int wg = threadIdx.x / 128, wtid = threadIdx.x % 128, lane = threadIdx.x % kWarp;
  const int n_tiles = (min(len, q0 + kAfRows) + kAfKeys - 1) / kAfKeys;  // causal: keys up to the last row
  const int mine = n_tiles > wg ? (n_tiles - wg + NW - 1) / NW : 0;  // tiles wg, wg + NW, ...
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int i = 0; i < NW * kAfStages; ++i) mbar_init(&full[i], 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) AF_STAMP(2);
  unsigned char* ring = smem + kAfTileBytes + size_t(wg) * kAfRingBytes;
  uint64_t* my_full = full + wg * kAfStages;
  auto load_tile = [&](int i) {  // this warpgroup's i-th tile into stage i % kAfStages
    unsigned char* st = ring + size_t(i % kAfStages) * kAfStageBytes;
    const int y = first + (wg + i * NW) * kAfKeys;
    mbar_expect_tx(&my_full[i % kAfStages], kAfStageBytes);
    tma_2d(st, &k_map, kv_head * kAfHd, y, &my_full[i % kAfStages]);
    tma_2d(st + kAfTileBytes, &v_map, kv_head * kAfHd, y, &my_full[i % kAfStages]);
  };
  if (wtid == 0) {
    if (wg == 0) {
      mbar_expect_tx(q_full, kAfTileBytes);
      tma_2d(smem, &q_map, head * kAfHd, first + q0, q_full);
    }
    for (int i = 0; i < min(mine, kAfStages); ++i) load_tile(i);
  }

  AfRows st;
#pragma unroll
  for (int i = 0; i < 32; ++i) st.o[i] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;
  const int row_a = q0 + (wtid / kWarp) * 16 + lane / 4;  // this thread's rows: row_a, row_a + 8
  if (mine > 0) mbar_wait(q_full, 0);
  if (threadIdx.x == 0) AF_STAMP(3);
  const unsigned q_at = smem_u32(smem), ring_at = smem_u32(ring);
  auto k_at = [&](int i) { return ring_at + unsigned(i % kAfStages) * kAfStageBytes; };
  auto kv0_of = [&](int i) { return (wg + i * NW) * kAfKeys; };
  auto masked = [&](int i) { return kv0_of(i) + kAfKeys > q0 || kv0_of(i) + kAfKeys > len; };
  auto wait_tile = [&](int i) {
    mbar_wait(&my_full[i % kAfStages], unsigned((i / kAfStages) & 1));
    if (threadIdx.x == 0 && i == 0) AF_STAMP(4);
  };
  auto refill = [&](int i) {  // tile i's stage is drained (every warp's MMAs on it completed)
    if (i + kAfStages < mine) {
      wg_bar_sync(wg);
      if (wtid == 0) load_tile(i + kAfStages);
    }
  };
  if constexpr (!kPipe) {
    for (int i = 0; i < mine; ++i) {
      wait_tile(i);
      af_step(st, q_at, k_at(i), k_at(i) + kAfTileBytes, kv0_of(i), row_a, len, masked(i), scale_log2, lane);
      refill(i);
    }
  } else if (mine > 0) {
    // Variant 5: S of tile i is issued with P V of tile i - 1, and tile i's
    // softmax runs while that P V is in flight; O takes tile i's correction
    // once it has completed -- the same operations on O as variant 4.
    float s[32], corr[2];
    uint32_t p[4][4];
    wait_tile(0);
    af_issue_s(s, q_at, k_at(0));
    wg_wait_all();
    fence_operands(s);
    af_softmax(st, s, corr, kv0_of(0), row_a, len, masked(0), scale_log2, lane);
    af_rescale<true>(st.o, corr);
    af_pack(p, s);
    for (int i = 1; i < mine; ++i) {
      wait_tile(i);
      fence_operands(st.o);
      af_issue_s(s, q_at, k_at(i));  // its wg_fence covers O's and P's registers too
      wg_commit();
      af_issue_pv(st.o, p, k_at(i - 1) + kAfTileBytes);
      wg_commit();
      wg_wait_prev();  // S of tile i is done; P V of tile i - 1 may still run
      fence_operands(s);
      af_softmax(st, s, corr, kv0_of(i), row_a, len, masked(i), scale_log2, lane);
      wg_wait_all();
      fence_operands(st.o);
      fence_fragments(p);  // read by the P V just completed: live until here
      af_rescale<true>(st.o, corr);
      af_pack(p, s);  // after the wait: P's registers are not redefined under the MMA reading them
      refill(i - 1);
    }
    fence_operands(st.o);
    wg_fence();
    af_issue_pv(st.o, p, k_at(mine - 1) + kAfTileBytes);
    wg_commit();
    wg_wait_all();
    fence_operands(st.o);
  }

  if (wtid == 0 && wg < 2) AF_STAMP(5 + wg);
  // Merge: warpgroups 1.. leave their states in their own (drained) rings;
  // warpgroup 0 merges them into its own and stores the rows.
  if (wg > 0) af_leave_state(st, reinterpret_cast<float*>(ring), wtid);
  __syncthreads();
  if (threadIdx.x == 0) AF_STAMP(7);
  if (wg == 0)
    af_merge_store<NW>(st, smem + kAfTileBytes, wtid, lane, row_a, len, out, first, head, q_stride);
#ifdef LANTERN_AF_PROBE
  if (threadIdx.x == 0) {
    AF_STAMP(8);
    unsigned smid_;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));
    AF_PUT(9, smid_);
    AF_PUT(10, n_tiles);
  }
#endif
}

// LANTERN_PREFILL_BALANCE=1 (read once; an experiment knob, off by default):
// the balanced block order above, for one sequence in one wave of two blocks
// per SM (257-528 tokens at 32 q heads on the H200). Session 32: an SM's key
// tiles max 16 -> 9 (mean 8.7), the 512-token kernel 13.0-13.5 -> 12.0 us in
// bench_kernels and its blocks' span 8.6 -> 7.0 us in the probe; the same
// blocks compute the same tiles (bit-identical). Not the default yet: behind
// another kernel the pairing holds only where the scheduler places the blocks
// as it would on idle SMs, and the engine A/B (-0.027 ms per 512-token
// prefill) was inside the spread (docs/performance.md, session 32).
int af_balance_sms(const AttentionPrefillArgs& a, int nw) {
  static const bool on = env_int("LANTERN_PREFILL_BALANCE", 0) != 0;
  if (!on || nw != 2 || a.num_seqs != 1) return 0;
  const long blocks = long(ceil_div(a.max_seq_len, kAfRows)) * a.n_q_heads;
  return prefill_order::balanced_fits(blocks, sm_count()) ? sm_count() : 0;
}

// LANTERN_PREFILL_WGS=2|4 forces the warpgroups per block (read once; an
// experiment knob for docs/performance.md); 0 or unset: the length rule.
int af_forced_wgs() {
  static const int v = [] {
    const int x = env_int("LANTERN_PREFILL_WGS", 0);
    return x == 2 || x == 4 ? x : 0;
  }();
  return v;
}

template <int NW, bool kPipe>
void launch_af(const AttentionPrefillArgs& a, const LaunchCtx& ctx, const CUtensorMap& q_map,
               const CUtensorMap& k_map, const CUtensorMap& v_map) {
  static const bool attr_set = [] {
    CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_wg_kernel<NW, kPipe>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(AfShape<NW>::kSmemBytes)));
    return true;
  }();
  (void)attr_set;
  const dim3 grid(unsigned(ceil_div(a.max_seq_len, kAfRows)), unsigned(a.n_q_heads), unsigned(a.num_seqs));
  const float log2e = 1.4426950408889634f;
  launch_kernel(true, attention_prefill_wg_kernel<NW, kPipe>, grid, dim3(AfShape<NW>::kThreads), AfShape<NW>::kSmemBytes,
                ctx.stream, q_map, k_map, v_map, static_cast<bf16*>(a.out), a.seq_starts, a.q_stride,
                a.n_q_heads / a.n_kv_heads, a.scale * log2e, af_balance_sms(a, NW));
  CUDA_CHECK_LAST("attention_prefill_wg_kernel");
}

}  // namespace

bool attention_prefill_wg_launch(const AttentionPrefillArgs& a, const LaunchCtx& ctx, bool pipelined) {
  if (a.head_dim != kAfHd || a.host_seq_starts == nullptr || a.q_stride % 8 != 0 || a.kv_stride % 8 != 0 ||
      !aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.out, 16) || !sm90a_device())
    return false;
  if (a.num_seqs == 0 || a.max_seq_len == 0) return true;
  const int rows = a.host_seq_starts[a.num_seqs];
  if (rows <= 0) return true;
  const char* who = pipelined ? "attention_prefill.wg_flash_pipe" : "attention_prefill.wg_flash";
  const CUtensorMap q_map =
      bf16_rows_map_sw128(a.q, rows, a.n_q_heads * kAfHd, size_t(a.q_stride) * sizeof(bf16), kAfRows, who);
  const CUtensorMap k_map =
      bf16_rows_map_sw128(a.k, rows, a.n_kv_heads * kAfHd, size_t(a.kv_stride) * sizeof(bf16), kAfKeys, who);
  const CUtensorMap v_map =
      bf16_rows_map_sw128(a.v, rows, a.n_kv_heads * kAfHd, size_t(a.kv_stride) * sizeof(bf16), kAfKeys, who);
  const bool four = af_forced_wgs() == 4;
  if (pipelined)
    four ? launch_af<4, true>(a, ctx, q_map, k_map, v_map) : launch_af<2, true>(a, ctx, q_map, k_map, v_map);
  else
    four ? launch_af<4, false>(a, ctx, q_map, k_map, v_map) : launch_af<2, false>(a, ctx, q_map, k_map, v_map);
  return true;
}

}  // namespace lantern::kernels
