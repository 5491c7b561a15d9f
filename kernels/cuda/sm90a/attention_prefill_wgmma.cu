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
#include "kernels/cuda/prefill_order.h"
#include "kernels/cuda/sm90a/attention_prefill_wg.cuh"
#include "kernels/cuda/sm90a/sm90a.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace af_detail;

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
  const AfTiles<NW> tiles{my_full, q_at, ring_at, wg, wtid, mine, q0, len, row_a, lane, scale_log2};
  af_key_tiles<kPipe>(st, tiles, load_tile);

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
