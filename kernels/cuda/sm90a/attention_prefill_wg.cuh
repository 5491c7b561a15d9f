#pragma once
// The device pieces of the wgmma prefill attention (attention_prefill 4 and 5;
// the kernel, its launch and the design notes are in
// attention_prefill_wgmma.cu, the only includer -- and through it
// scripts/probe/af_phases.cu): the probe's phase stamps, the tile shape, a
// thread's running row state, the pieces of one key tile (S = Q K^T, the
// masked online softmax, O's correction, P's fragments, O += P V), a
// warpgroup's walk over its key tiles in variant 4's order or variant 5's
// pipelined one, and the warpgroups' merge. Built for sm_90a only.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/flash_prefill_tile.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"
#include "kernels/cuda/tma_common.cuh"

namespace lantern::kernels::af_detail {
using namespace cuda_detail;

// Phase stamps for scripts/probe/af_phases.cu (that probe includes the kernel
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

// One warpgroup's key tiles (wg, wg + NW, ...: `mine` of them) in its ring of
// kAfStages stages at ring_at, completing on full[]; the query rows row_a and
// row_a + 8 of the block's tile at q0.
template <int NW>
struct AfTiles {
  uint64_t* full;
  unsigned q_at, ring_at;
  int wg, wtid, mine, q0, len, row_a, lane;
  float scale_log2;
  __device__ unsigned k_at(int i) const { return ring_at + unsigned(i % kAfStages) * kAfStageBytes; }
  __device__ unsigned v_at(int i) const { return k_at(i) + kAfTileBytes; }
  __device__ int kv0(int i) const { return (wg + i * NW) * kAfKeys; }
  __device__ bool masked(int i) const { return kv0(i) + kAfKeys > q0 || kv0(i) + kAfKeys > len; }
  __device__ void wait(int i) const {
    mbar_wait(&full[i % kAfStages], unsigned((i / kAfStages) & 1));
    if (threadIdx.x == 0 && i == 0) AF_STAMP(4);
  }
};

// The warpgroup's key tiles into st. load_tile(i) refills stage i % kAfStages
// with tile i once tile i - kAfStages's stage is drained (every warp's MMAs on
// it completed). Variant 4 waits for each piece of a tile before the next;
// variant 5 (kPipe) issues S of tile i with P V of tile i - 1, runs tile i's
// softmax while that P V is in flight and gives O tile i's correction once it
// has completed -- the same operations on O as variant 4.
template <bool kPipe, int NW, class Load>
__device__ __forceinline__ void af_key_tiles(AfRows& st, const AfTiles<NW>& t, Load&& load_tile) {
  auto refill = [&](int i) {  // tile i's stage is drained
    if (i + kAfStages < t.mine) {
      wg_bar_sync(t.wg);
      if (t.wtid == 0) load_tile(i + kAfStages);
    }
  };
  if constexpr (!kPipe) {
    for (int i = 0; i < t.mine; ++i) {
      t.wait(i);
      af_step(st, t.q_at, t.k_at(i), t.v_at(i), t.kv0(i), t.row_a, t.len, t.masked(i), t.scale_log2, t.lane);
      refill(i);
    }
    return;
  }
  if (t.mine <= 0) return;
  float s[32], corr[2];
  uint32_t p[4][4];
  t.wait(0);
  af_issue_s(s, t.q_at, t.k_at(0));
  wg_wait_all();
  fence_operands(s);
  af_softmax(st, s, corr, t.kv0(0), t.row_a, t.len, t.masked(0), t.scale_log2, t.lane);
  af_rescale<true>(st.o, corr);
  af_pack(p, s);
  for (int i = 1; i < t.mine; ++i) {
    t.wait(i);
    fence_operands(st.o);
    af_issue_s(s, t.q_at, t.k_at(i));  // its wg_fence covers O's and P's registers too
    wg_commit();
    af_issue_pv(st.o, p, t.v_at(i - 1));
    wg_commit();
    wg_wait_prev();  // S of tile i is done; P V of tile i - 1 may still run
    fence_operands(s);
    af_softmax(st, s, corr, t.kv0(i), t.row_a, t.len, t.masked(i), t.scale_log2, t.lane);
    wg_wait_all();
    fence_operands(st.o);
    fence_operands(p);  // read by the P V just completed: live until here
    af_rescale<true>(st.o, corr);
    af_pack(p, s);  // after the wait: P's registers are not redefined under the MMA reading them
    refill(i - 1);
  }
  fence_operands(st.o);
  wg_fence();
  af_issue_pv(st.o, p, t.v_at(t.mine - 1));
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

}  // namespace lantern::kernels::af_detail
