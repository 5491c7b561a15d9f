#pragma once
// Device pieces of the shared-memory-pipeline decode attention kernels: the
// tile shape, one warp's q.k / softmax / p.v on tensor cores, the cp.async
// tile loads and the per-warp state store. Used by attention_decode_pipe.cu
// (variants 6-11) and attention_decode_batched.cu (variant 12); the design
// notes are at the top of attention_decode_pipe.cu.
#include <algorithm>

#include "kernels/cuda/attention_decode_split.cuh"

namespace lantern::kernels::cuda_detail {

constexpr int kWarpKeys = 16;  // keys per warp and tile: the k extent of one p.v mma
constexpr int kRows = 16;       // q heads of a group, padded to the mma's rows
constexpr int kBlockRows = 32;  // q heads of a block (H kv heads x group) in the merge buffers
constexpr int kTableCap = 512;  // block-table entries of one split held in shared memory
constexpr int kStages = 3;

// A block of W warps serves H adjacent kv heads (their K/V rows are adjacent
// in the cache: H * HD contiguous elements per key); warp w takes kv head
// w % H and the w / H-th 16 keys of each tile.
// Swz (variant 13): a key's row is stored unpadded with its 16-byte units
// XOR-swizzled by the key's index mod 8 (unit u at u ^ (key & 7)), so the 8
// rows an ldmatrix reads still fall into distinct banks while the ring is
// 1/9 smaller (H * HD a multiple of 64 elements).
template <int HD, int H, int W, int St = kStages, bool Swz = false>
struct PipeShape {
  static constexpr int kRing = St;
  static constexpr bool kSwizzle = Swz;
  static constexpr int kThreads = W * kWarp;
  static constexpr int kKeyGroups = W / H;  // warps per kv head
  static constexpr int kTileKeys = kKeyGroups * kWarpKeys;
  static constexpr int kChunks = H * HD / 8;  // 16-byte units of a key's row
  // Shared-memory row of one key (elements): unswizzled, 16 bytes of padding
  // make the 8 rows an ldmatrix reads fall into distinct banks.
  static constexpr int kStride = Swz ? H * HD : H * HD + 8;
  static constexpr size_t kTileBytes = size_t(2) * kTileKeys * kStride * sizeof(bf16);  // K and V
  static constexpr size_t kSmem = St * kTileBytes + kTableCap * sizeof(int);
  // The warps' merge buffer reuses the stages once the loop is done.
  static_assert(size_t(kKeyGroups) * kBlockRows * HD * sizeof(float) <= St * kTileBytes);
  static_assert(W % H == 0);
  static_assert(!Swz || kChunks % 8 == 0);
};

// Element offset of 16-byte unit `unit` of key row `key` in a tile buffer.
template <int kStride, bool kSwz>
__device__ __forceinline__ int pipe_at(int key, int unit) {
  return key * kStride + (kSwz ? unit ^ (key & 7) : unit) * 8;
}

// One warp's 16 keys of a tile: S = Q K^T, online softmax, O += P V.
// ok[j * 2 + e]: key 8j + 2 * (lane % 4) + e is valid. m, l, o[..][2h..2h+1]
// belong to row (lane / 4) + 8h.
template <int HD, int kStride, bool kSwz = false>
__device__ __forceinline__ void pipe_warp_tile(const uint32_t (&qa)[HD / 16][4], const bf16* k_s,
                                               const bf16* v_s, const bool (&ok)[4], float scale_log2,
                                               float (&o)[HD / 8][4], float (&m)[2], float (&l)[2]) {
  const int lane = threadIdx.x % kWarp, mtx = lane / 8, r8 = lane % 8;
  float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    // Matrices: keys 0-7 / 8-15 (mtx >> 1) x dims kk*16 + 0-7 / 8-15 (mtx & 1).
    uint32_t kb[4];
    ldmatrix_x4(kb, k_s + pipe_at<kStride, kSwz>((mtx >> 1) * 8 + r8, kk * 2 + (mtx & 1)));
    mma_bf16_16816(s[0], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kb[0], kb[1]);
    mma_bf16_16816(s[1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kb[2], kb[3]);
  }
  uint32_t pa[4];  // P as the A operand: rows g / g + 8, keys 2t.. / 2t + 8..
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float x[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = ok[k] ? s[k / 2][h * 2 + k % 2] * scale_log2 : -INFINITY;
    float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(m[h], mx);
    const float corr = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing valid yet: p = 0
    float p[4], psum = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      p[k] = __bfloat162float(__float2bfloat16(exp2f(x[k] - base)));
      psum += p[k];
    }
    l[h] = l[h] * corr + psum;
    m[h] = m_new;
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      o[nd][h * 2] *= corr;
      o[nd][h * 2 + 1] *= corr;
    }
    pa[h] = pack_bf16x2(p[0], p[1]);
    pa[2 + h] = pack_bf16x2(p[2], p[3]);
  }
#pragma unroll
  for (int nd = 0; nd < HD / 8; nd += 2) {
    // Transposed matrices: keys 0-7 / 8-15 (mtx & 1) x dims of tile nd / nd + 1 (mtx >> 1).
    uint32_t vb[4];
    ldmatrix_x4_trans(vb, v_s + pipe_at<kStride, kSwz>((mtx & 1) * 8 + r8, nd + (mtx >> 1)));
    mma_bf16_16816(o[nd], pa[0], pa[1], pa[2], pa[3], vb[0], vb[1]);
    mma_bf16_16816(o[nd + 1], pa[0], pa[1], pa[2], pa[3], vb[2], vb[3]);
  }
}

// What a block needs to address its split.
struct PipeSplit {
  const bf16* head_base;  // pool + first kv head * HD
  const int* table_s;     // the split's block-table entries, from first_blk
  int first_blk, begin, end, block_size;
  int bs_shift;  // log2(block_size) when it is a power of two (the usual 16), else -1
  size_t row_elems, half_block;
  // Key t's cache block (of the sequence) and row in it: shifts instead of an
  // integer division by a run-time value (~20 instructions) per 16-byte piece.
  __device__ int blk_of(int t) const { return bs_shift >= 0 ? t >> bs_shift : t / block_size; }
  __device__ int row_of(int t) const { return bs_shift >= 0 ? t & (block_size - 1) : t % block_size; }
  __device__ bool key_ok(int t) const { return t < end && table_s[blk_of(t) - first_blk] >= 0; }
  __device__ static int shift_of(int block_size) {  // bs_shift for block_size
    return (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
  }
};

// The split of [0, ctx) a block owns, with its block-table entries copied to
// `table_s` (ends with a barrier). Splits are sized from the real context
// (variant 4): max(kMinSplitKeys, ceil(ctx / n_splits)) keys, rounded up to a
// multiple of kAlign (variant 17: whole 64-key tiles); n_eff of them hold
// keys. A context of at most kOneSplitKeys keys (variant 17: 256) is one
// split, whatever n_splits: no combine. Returns false (nothing copied, no
// barrier) for a split past them.
// Keys per split of a ctx-key context over n_splits (see pipe_split_setup).
template <int kAlign = 1, int kOneSplitKeys = 0>
__device__ __forceinline__ int split_keys(int ctx, int n_splits) {
  const int keys = ctx <= kOneSplitKeys ? max(ctx, 1) : max(kMinSplitKeys, (ctx + n_splits - 1) / n_splits);
  return (keys + kAlign - 1) / kAlign * kAlign;
}
// How many splits of len keys hold keys of a ctx-key context (at least one).
__device__ __forceinline__ int splits_holding(int ctx, int len) { return max(1, (ctx + len - 1) / len); }

template <int kThreads, int HD, int kAlign = 1, int kOneSplitKeys = 0>
__device__ __forceinline__ bool pipe_split_setup(PipeSplit& p, int& n_eff, int split, int n_splits, int ctx,
                                                 const int32_t* table, int block_size, int n_kv_heads,
                                                 const bf16* head_base, int* table_s) {
  static_assert(kMinSplitKeys % kAlign == 0 && kOneSplitKeys % kAlign == 0 && kOneSplitKeys < kTableCap);
  const int len = split_keys<kAlign, kOneSplitKeys>(ctx, n_splits);
  n_eff = splits_holding(ctx, len);
  if (split >= n_eff) return false;
  p.begin = split * len;
  p.end = min(ctx, p.begin + len);
  p.block_size = block_size;
  p.bs_shift = PipeSplit::shift_of(block_size);
  p.first_blk = p.begin / block_size;
  p.row_elems = size_t(n_kv_heads) * HD;
  p.half_block = size_t(block_size) * p.row_elems;
  p.head_base = head_base;
  p.table_s = table_s;
  const int n_blk = p.end > p.begin ? (p.end - 1) / block_size - p.first_blk + 1 : 0;
  for (int b = threadIdx.x; b < n_blk; b += kThreads) table_s[b] = table[p.first_blk + b];
  __syncthreads();
  return true;
}

// Q of one kv head's group as the mma A operand (rows = the group's heads,
// zero past it), and the empty online-softmax state.
template <int HD>
__device__ __forceinline__ void pipe_q_and_state(const bf16* qh, int group, uint32_t (&qa)[HD / 16][4],
                                                 float (&o)[HD / 8][4], float (&m)[2], float (&l)[2]) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, tq = lane % 4;
  auto q_pair = [&](int row, int dim) {
    return row < group ? *reinterpret_cast<const uint32_t*>(qh + size_t(row) * HD + dim) : 0u;
  };
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    qa[kk][0] = q_pair(g, kk * 16 + 2 * tq);
    qa[kk][1] = q_pair(g + 8, kk * 16 + 2 * tq);
    qa[kk][2] = q_pair(g, kk * 16 + 2 * tq + 8);
    qa[kk][3] = q_pair(g + 8, kk * 16 + 2 * tq + 8);
  }
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
}

// Issue the cp.async copies of tile `tile` (K and V rows) into stage buffer
// `k_s` (V follows K); invalid keys are zero-filled. Key `skip_t` is left
// alone (variant 9: the newest row, stored after the dependency wait).
template <class S>
__device__ __forceinline__ void pipe_load_tile(const PipeSplit& p, int tile, bf16* k_s, int skip_t = -1) {
  constexpr int kChunks = S::kChunks, kStride = S::kStride, kTileKeys = S::kTileKeys;
  static_assert(kTileKeys * kChunks % S::kThreads == 0);
  bf16* v_s = k_s + kTileKeys * kStride;
#pragma unroll
  for (int j = 0; j < kTileKeys * kChunks / S::kThreads; ++j) {
    const int c = threadIdx.x + j * S::kThreads, key = c / kChunks, piece = c % kChunks;
    const int t = p.begin + tile * kTileKeys + key;
    if (t == skip_t) continue;
    const int blk = t < p.end ? p.table_s[p.blk_of(t) - p.first_blk] : -1;
    const bool valid = blk >= 0;
    const bf16* src = valid ? p.head_base + size_t(blk) * 2 * p.half_block +
                                  size_t(p.row_of(t)) * p.row_elems + piece * 8
                            : p.head_base;
    const int at = pipe_at<kStride, S::kSwizzle>(key, piece);
    cp_async16(k_s + at, src, valid);
    cp_async16(v_s + at, valid ? src + p.half_block : src, valid);
  }
}

// Variant 9: key t's K and V rows into its slot of the tile buffer `k_s`
// with plain loads and shared stores (the block's first threads, one 16-byte
// piece each); visible to the tile's compute after the loop's barrier.
template <class S>
__device__ __forceinline__ void pipe_store_row(const PipeSplit& p, int t, int key, bf16* k_s) {
  constexpr int kChunks = S::kChunks;
  static_assert(kChunks <= S::kThreads);
  const int piece = threadIdx.x;
  const int blk = p.table_s[p.blk_of(t) - p.first_blk];
  if (piece >= kChunks || blk < 0) return;
  const bf16* src = p.head_base + size_t(blk) * 2 * p.half_block + size_t(p.row_of(t)) * p.row_elems + piece * 8;
  bf16* v_s = k_s + S::kTileKeys * S::kStride;
  const int at = pipe_at<S::kStride, S::kSwizzle>(key, piece);
  *reinterpret_cast<uint4*>(k_s + at) = *reinterpret_cast<const uint4*>(src);
  *reinterpret_cast<uint4*>(v_s + at) = *reinterpret_cast<const uint4*>(src + p.half_block);
}

// After the dependency wait (variants 9 and 12-14): key `newest`, which the
// tile loads issued before the wait skipped, into its tile's stage if that
// tile is one of the first `issued` (stage t at stages + t * a stage's elements).
template <class S>
__device__ __forceinline__ void pipe_store_newest(const PipeSplit& p, int newest, int issued, bf16* stages) {
  const int tile = (newest - p.begin) / S::kTileKeys;
  if (newest >= p.begin && newest < p.end && tile < issued)
    pipe_store_row<S>(p, newest, newest - p.begin - tile * S::kTileKeys,
                      stages + size_t(tile) * 2 * S::kTileKeys * S::kStride);
}

// A warp's final state into the merge buffers (rows < group only) as state
// `state`, rows from row0: the row sums are completed over the quad first.
template <int HD>
__device__ __forceinline__ void pipe_store_state(const float (&o)[HD / 8][4], const float (&m)[2], float (&l)[2],
                                                 int group, int state, int row0, float* sm_m, float* sm_l,
                                                 float* sm_o) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(kFullMask, l[h], 1);
    l[h] += __shfl_xor_sync(kFullMask, l[h], 2);
    const int row = g + 8 * h;
    if (row >= group) continue;
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      float* dst = sm_o + (state * kBlockRows + row0 + row) * HD + nd * 8 + 2 * tq;
      dst[0] = o[nd][h * 2];
      dst[1] = o[nd][h * 2 + 1];
    }
    if (tq == 0) {
      sm_m[state * kBlockRows + row0 + row] = m[h];
      sm_l[state * kBlockRows + row0 + row] = l[h];
    }
  }
}

// ---- Variant 14: the same tile with the mma's roles swapped (GQA groups <= 8).
// S^T = K Q^T puts 16 keys on the mma's m side and the group's q heads on its
// n side (8 columns), so a group of 4 pads to 8 columns instead of 16 rows:
// half the q.k and p.v mma, half the exponentials and rescales of the
// untransposed tile (which Nsight Compute showed the batch-256 kernel issuing
// at 66 % of the SM's throughput while DRAM ran at 46 %). P^T reaches p.v as
// the B operand through movmatrix.trans of the S^T fragments; O^T (head_dim x
// 8 heads) stays in fp32 registers. Lane (g, tq) holds keys g and g + 8 of
// heads 2tq and 2tq + 1; m is reduced over the 8 lanes of a column (xor 4, 8,
// 16), l stays a per-lane partial until the state is stored.

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
  return d;
}

// The empty transposed state: no key seen (m = -inf, l = 0, o = 0).
template <int HD>
__device__ __forceinline__ void pipe_empty_state_t(float (&o)[HD / 16][4], float (&m)[2], float (&l)[2]) {
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;
#pragma unroll
  for (int d = 0; d < HD / 16; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
}

// Q^T of one kv head's group as the mma B operand (columns = heads, zero past
// the group) and the empty state.
template <int HD>
__device__ __forceinline__ void pipe_qt_and_state(const bf16* qh, int group, uint32_t (&qb)[HD / 16][2],
                                                  float (&o)[HD / 16][4], float (&m)[2], float (&l)[2]) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    qb[kk][0] = g < group ? *reinterpret_cast<const uint32_t*>(qh + size_t(g) * HD + kk * 16 + 2 * tq) : 0u;
    qb[kk][1] = g < group ? *reinterpret_cast<const uint32_t*>(qh + size_t(g) * HD + kk * 16 + 2 * tq + 8) : 0u;
  }
  pipe_empty_state_t<HD>(o, m, l);
}

// One warp's 16 keys of a tile, transposed. ok[0] / ok[1]: key g / g + 8 is valid.
template <int HD, int kStride, bool kSwz>
__device__ __forceinline__ void pipe_warp_tile_t(const uint32_t (&qb)[HD / 16][2], const bf16* k_s,
                                                 const bf16* v_s, const bool (&ok)[2], float scale_log2,
                                                 float (&o)[HD / 16][4], float (&m)[2], float (&l)[2]) {
  const int lane = threadIdx.x % kWarp, mtx = lane / 8, r8 = lane % 8;
  float s[4] = {0, 0, 0, 0};
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    // A = K: matrices keys 0-7 / 8-15 (mtx & 1) x dims kk*16 + 0-7 / 8-15 (mtx >> 1).
    uint32_t ka[4];
    ldmatrix_x4(ka, k_s + pipe_at<kStride, kSwz>((mtx & 1) * 8 + r8, kk * 2 + (mtx >> 1)));
    mma_bf16_16816(s, ka[0], ka[1], ka[2], ka[3], qb[kk][0], qb[kk][1]);
  }
  float p[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // head 2tq + h: s[h] (key g), s[2 + h] (key g + 8)
    const float x0 = ok[0] ? s[h] * scale_log2 : -INFINITY;
    const float x1 = ok[1] ? s[2 + h] * scale_log2 : -INFINITY;
    float mx = fmaxf(x0, x1);
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 16));
    const float m_new = fmaxf(m[h], mx);
    const float corr = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing valid yet: p = 0
    p[h] = __bfloat162float(__float2bfloat16(exp2f(x0 - base)));
    p[2 + h] = __bfloat162float(__float2bfloat16(exp2f(x1 - base)));
    l[h] = l[h] * corr + (p[h] + p[2 + h]);
    m[h] = m_new;
#pragma unroll
    for (int d = 0; d < HD / 16; ++d) {
      o[d][h] *= corr;
      o[d][2 + h] *= corr;
    }
  }
  // P^T as the B operand: (keys 2tq.., head g) = the transpose of the S^T fragment.
  const uint32_t pb0 = movmatrix_trans(pack_bf16x2(p[0], p[1]));  // keys 0-7
  const uint32_t pb1 = movmatrix_trans(pack_bf16x2(p[2], p[3]));  // keys 8-15
#pragma unroll
  for (int d = 0; d < HD / 16; ++d) {
    // A = V^T: transposed matrices of keys 0-7 / 8-15 (mtx >> 1) x dims d*16 + 0-7 / 8-15 (mtx & 1).
    uint32_t va[4];
    ldmatrix_x4_trans(va, v_s + pipe_at<kStride, kSwz>((mtx >> 1) * 8 + r8, d * 2 + (mtx & 1)));
    mma_bf16_16816(o[d], va[0], va[1], va[2], va[3], pb0, pb1);
  }
}

// The transposed tile's row sum l (a head's keys spread over lanes g = lane / 4) summed over its 8 lanes.
__device__ __forceinline__ float sum_over_key_lanes(float l) {
  l += __shfl_xor_sync(kFullMask, l, 4);
  l += __shfl_xor_sync(kFullMask, l, 8);
  return l + __shfl_xor_sync(kFullMask, l, 16);
}

// The lane's two heads of a transposed state (head 2tq + h): completes l[h]
// over the head's 8 key lanes (every lane takes part), then calls
// f(h, head) for the heads below `group`.
template <class F>
__device__ __forceinline__ void for_lane_heads_t(float (&l)[2], int group, F&& f) {
  const int tq = threadIdx.x % kWarp % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = sum_over_key_lanes(l[h]);
    if (2 * tq + h < group) f(h, 2 * tq + h);
  }
}

// The lane's dims of head h of the transposed o (g and g + 8 of every 16) as st(dim, value).
template <int HD, class St>
__device__ __forceinline__ void store_head_t(const float (&o)[HD / 16][4], int h, St&& st) {
  const int g = threadIdx.x % kWarp / 4;
#pragma unroll
  for (int d = 0; d < HD / 16; ++d) {
    st(d * 16 + g, o[d][h]);
    st(d * 16 + g + 8, o[d][2 + h]);
  }
}

// The transposed state into the merge buffers, the layout pipe_store_state
// writes (rows = the group's heads < group; kStateRows rows per state); l is
// completed over the column.
template <int HD, int kStateRows = kBlockRows>
__device__ __forceinline__ void pipe_store_state_t(const float (&o)[HD / 16][4], const float (&m)[2], float (&l)[2],
                                                   int group, int state, int row0, float* sm_m, float* sm_l,
                                                   float* sm_o) {
  const int g = threadIdx.x % kWarp / 4;
  for_lane_heads_t(l, group, [&](int h, int head) {
    float* dst = sm_o + (state * kStateRows + row0 + head) * HD;
    store_head_t<HD>(o, h, [&](int dim, float v) { dst[dim] = v; });
    if (g == 0) {
      sm_m[state * kStateRows + row0 + head] = m[h];
      sm_l[state * kStateRows + row0 + head] = l[h];
    }
  });
}

// Host: whether the longest of n splits of a max_context-key context (split_keys
// with kAlign = align) has its block-table entries fit the shared copy (kTableCap).
inline bool split_table_fits(int max_context, int n, int align, int block_size) {
  const int len = ceil_div(std::max(kMinSplitKeys, ceil_div(max_context, n)), align) * align;
  return ceil_div(len, block_size) + 1 <= kTableCap;
}

// Shapes the pipe kernels serve (others fall back to the register kernels).
inline bool pipe_supports(const AttentionDecodeArgs& a) {
  const int hd = a.cache.head_dim;
  return (hd == 64 || hd == 128) && a.n_q_heads / a.cache.n_kv_heads <= kRows && a.q_stride % 8 == 0 &&
         aligned(a.q, 16) && aligned(a.out, 16) && aligned(a.cache.pool, 16) &&
         long(a.b) * a.cache.n_kv_heads <= kMaxSplitCounters;
}

// Variant 11 (attention_decode_pipe.cu): variant 12's launcher runs it where its own kernel does not apply.
void decode_split_early48(const AttentionDecodeArgs& a, const LaunchCtx& ctx);
// Variant 14 (attention_decode_batched.cu) as a launcher, and the splits its
// own kernel runs with for `a` (0: it hands the launch to variant 11).
void decode_batched_transposed(const AttentionDecodeArgs& a, const LaunchCtx& ctx, const char* who);
int batched_transposed_splits(const AttentionDecodeArgs& a, const LaunchCtx& ctx);

}  // namespace lantern::kernels::cuda_detail
