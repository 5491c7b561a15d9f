#pragma once
// The pieces of a tensor-core flash-attention warp shared by
// attention_prefill.2 (flash_mma, attention_prefill.cu) and .3 (flash_pair,
// attention_prefill_pair.cu): loading row tiles into shared memory, one
// 16-query x 64-key step (S = QK^T, causal mask, online softmax in the log2
// domain, O += PV) and the normalised store of a warp's 16 rows. Tiles hold
// rows of HD bf16 at a pitch of HD + 8 (a 16-byte pad: conflict-free ldmatrix).
// Fragment layout (mma.m16n8k16): lane = 4 g + t owns query rows g and g + 8
// of the warp's 16 and, per 8-column n-tile, columns 2t and 2t + 1.
#include "kernels/cuda/cuda_common.cuh"

namespace lantern::kernels::cuda_detail {

constexpr int kFlashKeys = 64;  // keys per warp step

template <int HD>
struct FlashTile {
  static constexpr int kPitch = HD + 8;
  static constexpr int kKSteps = HD / 16;  // k-steps of Q K^T
  static constexpr int kDTiles = HD / 8;   // n-tiles of the output
};

// Copies `rows` rows (HD bf16 at `base + row * stride`) into a tile with
// kThreads threads; rows >= rows_valid are zero-filled (no global read).
template <int HD, int kThreads>
__device__ __forceinline__ void load_rows_async(bf16* tile, const bf16* base, int stride, int rows,
                                                int rows_valid) {
  constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
    const int row = c / kChunks, piece = c % kChunks;
    const bool valid = row < rows_valid;
    cp_async16(tile + row * FlashTile<HD>::kPitch + piece * 8,
               base + size_t(valid ? row : 0) * stride + piece * 8, valid);
  }
}

// The warp's Q fragments (16 rows of a tile starting at `q_rows`).
template <int HD>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[HD / 16][4], const bf16* q_rows,
                                                 int lane) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    ldmatrix_x4(qf[kk], q_rows + (lane & 15) * FlashTile<HD>::kPitch + kk * 16 + (lane >> 4) * 8);
}

// The running state of a warp's 16 query rows: output accumulators, row max
// (log2 domain, quad-uniform) and this thread's partial row sums.
template <int HD>
struct FlashRows {
  float o[HD / 8][4];
  float m[2];
  float l[2];
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }
};

// One step over keys [kv0, kv0 + 64) held at kt / vt (64 rows each). Keys past
// a row (causal) or at/after `len` are masked when `needs_mask`; a row that has
// seen only masked keys keeps m = -inf and contributes nothing (no NaN).
// 2^x in one MUFU instruction (flushes subnormal results to 0: a weight below
// 2^-126 of the row max is 0 either way once P is rounded to bf16).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// kFast: exponents as one FFMA (s * scale - m) and fast_exp2 instead of a
// scaling pass and exp2f; the row max is kept in scaled units either way.
template <int HD, bool kFast = false>
__device__ __forceinline__ void flash_step(FlashRows<HD>& st, const uint32_t (&qf)[HD / 16][4],
                                           const bf16* kt, const bf16* vt, int kv0, int row_a,
                                           int row_b, int len, bool needs_mask, float scale_log2,
                                           int lane) {
  constexpr int kPitch = FlashTile<HD>::kPitch;
  const int t = lane % 4;
  float s[kFlashKeys / 8][4];
#pragma unroll
  for (int n = 0; n < kFlashKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int p = 0; p < kFlashKeys / 16; ++p) {
      uint32_t b[4];
      const int mat = lane >> 3;
      ldmatrix_x4(b, kt + (p * 16 + (mat >> 1) * 8 + (lane & 7)) * kPitch + kk * 16 + (mat & 1) * 8);
      mma_bf16_16816(s[2 * p], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
      mma_bf16_16816(s[2 * p + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
    }
  }
  if (!kFast) {
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= scale_log2;
  }
  if (needs_mask) {  // warp-uniform: a branch, not 32 predicated selects in every step
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kv0 + n * 8 + 2 * t + (e & 1);
        const int row = e < 2 ? row_a : row_b;
        if (key > row || key >= len) s[n][e] = -INFINITY;
      }
    }
  }
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows are shared by the 4 threads of a quad
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(st.m[h], kFast ? mx * scale_log2 : mx);  // scale_log2 > 0
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: no NaN
    corr[h] = kFast ? fast_exp2(st.m[h] - m_use) : exp2f(st.m[h] - m_use);
    st.m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e)
        s[n][e] = kFast ? fast_exp2(fmaf(s[n][e], scale_log2, -m_use)) : exp2f(s[n][e] - m_use);
      sum += s[n][2 * h] + s[n][2 * h + 1];
    }
    st.l[h] = st.l[h] * corr[h] + sum;
  }
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) {
    st.o[d][0] *= corr[0];
    st.o[d][1] *= corr[0];
    st.o[d][2] *= corr[1];
    st.o[d][3] *= corr[1];
  }
  // O += P V: P fragments come straight from the S accumulators.
#pragma unroll
  for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
    const uint32_t a0 = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    const uint32_t a1 = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    const uint32_t a2 = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    const uint32_t a3 = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      const int mat = lane >> 3;
      ldmatrix_x4_trans(b, vt + (kk * 16 + (mat & 1) * 8 + (lane & 7)) * kPitch + dp * 16 + (mat >> 1) * 8);
      mma_bf16_16816(st.o[2 * dp], a0, a1, a2, a3, b[0], b[1]);
      mma_bf16_16816(st.o[2 * dp + 1], a0, a1, a2, a3, b[2], b[3]);
    }
  }
}

// Normalises and writes this thread's two rows (row_a, row_a + 8) of one
// head; `dst` points at (row 0 of the sequence, this head, column 0). Rows at
// or past `len` are not written.
template <int HD>
__device__ __forceinline__ void flash_store_rows(const FlashRows<HD>& st, bf16* dst, int q_stride,
                                                 int row_a, int len, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = row_a + 8 * h;
    if (row < len) {
      bf16* p = dst + size_t(row) * q_stride + 2 * t;
#pragma unroll
      for (int d = 0; d < HD / 8; ++d)
        *reinterpret_cast<__nv_bfloat162*>(p + d * 8) =
            __floats2bfloat162_rn(st.o[d][2 * h] * inv, st.o[d][2 * h + 1] * inv);
    }
  }
}

}  // namespace lantern::kernels::cuda_detail
