// attention_prefill: causal GQA self-attention over whole prompts; sequence s
// owns rows [seq_starts[s], seq_starts[s+1]); out may alias q.
//
// Variant 1 (seed, corrected): the seed's per-head cuBLAS approach. For each
//   sequence and each position r inside a GQA group, two strided-batched GEMMs
//   over the kv heads (q head = kv head * group + r):
//     scores[g] = scale * Q_h K_g^T         (bf16 in, fp32 scores, fp32 compute)
//     softmax rows with the causal mask     (masked entries are exactly 0: no NaN)
//     out_h    = P V_g                      (P bf16 written over its own score row)
//   Workspace: n_kv_heads * max_seq_len^2 fp32 scores. Row softmax holds a row
//   in shared memory: max_seq_len <= 56K. Any head_dim. Needs host_seq_starts.
// Variant 2 (flash_mma): one fused kernel, no scores in memory. A block owns 64
//   query rows of one (sequence, q head); 4 warps x 16 rows. K/V tiles of 64 keys
//   stream through shared memory with cp.async double buffering (zero-filled
//   past the sequence end); S = Q K^T and O += P V run on tensor cores
//   (mma.m16n8k16 bf16, fp32 accumulators, ldmatrix fragments); online softmax
//   in the log2 domain; only the diagonal tile is masked; heaviest tiles first.
//   head_dim 32, 64 or 128 (others, or unaligned rows, fall back to variant 1
//   when the workspace allows it, else a clear error).
#include <algorithm>
#include <vector>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

void check_prefill(const AttentionPrefillArgs& a, const char* who) {
  LANTERN_CHECK(a.num_seqs >= 0 && a.head_dim > 0 && a.n_kv_heads > 0 &&
                    a.n_q_heads % a.n_kv_heads == 0,
                "%s: bad shape (seqs %d, q heads %d, kv heads %d, head_dim %d)", who, a.num_seqs,
                a.n_q_heads, a.n_kv_heads, a.head_dim);
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * a.head_dim && a.kv_stride >= a.n_kv_heads * a.head_dim,
                "%s: strides (q %d, kv %d) are smaller than the heads they hold", who, a.q_stride,
                a.kv_stride);
  if (a.host_seq_starts) {
    for (int s = 0; s < a.num_seqs; ++s) {
      const int len = a.host_seq_starts[s + 1] - a.host_seq_starts[s];
      LANTERN_CHECK(len >= 0 && len <= a.max_seq_len,
                    "%s: sequence %d has %d tokens, outside [0, max_seq_len=%d]", who, s, len,
                    a.max_seq_len);
    }
  }
}

// ------------------------------------------------------------------ variant 1
constexpr int kSeedMaxLen = 56 * 1024;  // a score row in shared memory (227 KB)

size_t seed_scores_bytes(int n_kv_heads, int len) {
  return size_t(n_kv_heads) * size_t(len) * size_t(len) * sizeof(float);
}

size_t prefill_seed_workspace(const WorkspaceShape& s) {
  return seed_scores_bytes(s.n_kv_heads, s.max_seq_len);
}

// One block per (query row, batch entry): softmax of scores[row, 0..row] in
// place; writes the bf16 probabilities over the start of the same fp32 row
// (ld 2*len bf16), zeros for the masked keys. Reads finish before any write.
__global__ void causal_softmax_kernel(float* scores, int len) {
  extern __shared__ float row_vals[];  // [len]
  __shared__ float scratch[32];
  const int i = blockIdx.x;
  float* row = scores + (size_t(blockIdx.y) * len + i) * len;
  const int valid = i + 1;  // causal: keys 0..i
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const float v = row[j];
    row_vals[j] = v;
    mx = fmaxf(mx, v);
  }
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const float e = expf(row_vals[j] - mx);
    row_vals[j] = e;
    sum += e;
  }
  sum = block_sum(sum, scratch);  // barrier: every read of `row` is done
  const float inv = 1.0f / sum;
  bf16* p = reinterpret_cast<bf16*>(row);
  for (int j = threadIdx.x; j < len; j += blockDim.x)
    p[j] = __float2bfloat16(j < valid ? row_vals[j] * inv : 0.0f);
}

void prefill_seed(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  check_prefill(a, "attention_prefill.seed");
  LANTERN_CHECK(a.host_seq_starts != nullptr,
                "attention_prefill.seed: needs host_seq_starts (it loops over sequences on the host)");
  LANTERN_CHECK(ctx.cublas != nullptr, "attention_prefill.seed: LaunchCtx has no cuBLAS handle");
  if (a.num_seqs == 0) return;
  const int group = a.n_q_heads / a.n_kv_heads, hd = a.head_dim;
  int longest = 0;
  for (int s = 0; s < a.num_seqs; ++s)
    longest = std::max(longest, a.host_seq_starts[s + 1] - a.host_seq_starts[s]);
  LANTERN_CHECK(longest <= kSeedMaxLen, "attention_prefill.seed: a %d-token sequence exceeds %d",
                longest, kSeedMaxLen);
  LANTERN_CHECK(ctx.workspace && ctx.workspace_bytes >= seed_scores_bytes(a.n_kv_heads, longest),
                "attention_prefill.seed: workspace of %zu bytes is smaller than the %zu its "
                "scores need (%d kv heads x %d^2 floats)", ctx.workspace_bytes,
                seed_scores_bytes(a.n_kv_heads, longest), a.n_kv_heads, longest);
  static const bool smem_raised = [] {
    CUDA_CHECK(cudaFuncSetAttribute(causal_softmax_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kSeedMaxLen * int(sizeof(float))));
    return true;
  }();
  (void)smem_raised;
  CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
  CUBLAS_CHECK(cublasSetPointerMode(ctx.cublas, CUBLAS_POINTER_MODE_HOST));
  const auto* q = static_cast<const bf16*>(a.q);
  const auto* k = static_cast<const bf16*>(a.k);
  const auto* v = static_cast<const bf16*>(a.v);
  auto* out = static_cast<bf16*>(a.out);
  auto* scores = static_cast<float*>(ctx.workspace);
  const float zero = 0.0f, one = 1.0f, scale = a.scale;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int first = a.host_seq_starts[s], len = a.host_seq_starts[s + 1] - first;
    if (len == 0) continue;
    const long long ll = len;
    for (int r = 0; r < group; ++r) {
      // Column-major view: scores_g^T[len_k, len_q] = K_g (T) x Q_h^T (N).
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, len, len, hd, &scale, k + size_t(first) * a.kv_stride,
          CUDA_R_16BF, a.kv_stride, hd, q + size_t(first) * a.q_stride + size_t(r) * hd, CUDA_R_16BF,
          a.q_stride, static_cast<long long>(group) * hd, &zero, scores, CUDA_R_32F, len, ll * ll, a.n_kv_heads,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      causal_softmax_kernel<<<dim3(len, a.n_kv_heads), 256, len * sizeof(float), ctx.stream>>>(
          scores, len);
      CUDA_CHECK_LAST("causal_softmax_kernel");
      // out_h^T[hd, len_q] = V_g^T (N) x P^T (N); P rows have ld 2*len bf16.
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, hd, len, len, &one, v + size_t(first) * a.kv_stride,
          CUDA_R_16BF, a.kv_stride, hd, scores, CUDA_R_16BF, 2 * len, 2 * ll * ll, &zero,
          out + size_t(first) * a.q_stride + size_t(r) * hd, CUDA_R_16BF, a.q_stride, group * hd,
          a.n_kv_heads, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

// ------------------------------------------------------------------ variant 2
constexpr int kBr = 64, kBc = 64;  // query rows, keys per tile
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;

template <int HD>
struct FlashSmem {
  static constexpr int kPitch = HD + 8;  // bf16 elements: 16-byte pad, conflict-free ldmatrix
  static constexpr int kTile = kBr * kPitch;
  static constexpr size_t kBytes = size_t(5) * kTile * sizeof(bf16);  // Q, K[2], V[2]
};

// Copies rows [row0, row0 + 64) of one head (HD bf16 at `base + row * stride`)
// into a tile; rows >= rows_valid are zero-filled.
template <int HD>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* base, int stride,
                                                int rows_valid) {
  constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  for (int c = threadIdx.x; c < kBr * kChunks; c += kFlashThreads) {
    const int row = c / kChunks, piece = c % kChunks;
    const bool valid = row < rows_valid;
    cp_async16(tile + row * FlashSmem<HD>::kPitch + piece * 8,
               base + size_t(valid ? row : 0) * stride + piece * 8, valid);
  }
}

template <int HD>
__global__ void __launch_bounds__(kFlashThreads, 2)
    flash_prefill_kernel(const bf16* q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                         bf16* out, const int32_t* __restrict__ seq_starts, int q_stride,
                         int kv_stride, int group, float scale_log2) {
  constexpr int kPitch = FlashSmem<HD>::kPitch;
  constexpr int kKSteps = HD / 16;  // k-steps of Q K^T
  constexpr int kDTiles = HD / 8;   // n-tiles of the output
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_tile = reinterpret_cast<bf16*>(smem_raw);
  bf16* k_tiles = q_tile + FlashSmem<HD>::kTile;          // [2][tile]
  bf16* v_tiles = k_tiles + 2 * FlashSmem<HD>::kTile;     // [2][tile]

  const int seq = blockIdx.z, head = blockIdx.y, kv_head = head / group;
  const int first = seq_starts[seq], len = seq_starts[seq + 1] - first;
  const int tile_idx = gridDim.x - 1 - blockIdx.x;  // heaviest (last) tiles start first
  const int q0 = tile_idx * kBr;
  if (q0 >= len) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;

  const bf16* q_base = q + size_t(first + q0) * q_stride + size_t(head) * HD;
  const bf16* k_base = k + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const bf16* v_base = v + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const int kv_end = min(len, q0 + kBr);  // causal: no key beyond the tile's last row
  const int n_tiles = (kv_end + kBc - 1) / kBc;

  load_tile_async<HD>(q_tile, q_base, q_stride, len - q0);
  load_tile_async<HD>(k_tiles, k_base, kv_stride, kv_end);
  load_tile_async<HD>(v_tiles, v_base, kv_stride, kv_end);
  cp_async_commit();

  uint32_t qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;  // this thread's two query rows

  for (int j = 0; j < n_tiles; ++j) {
    const int kv0 = j * kBc;
    if (j + 1 < n_tiles) {
      const int nxt = (j + 1) & 1;
      load_tile_async<HD>(k_tiles + nxt * FlashSmem<HD>::kTile, k_base + size_t(kv0 + kBc) * kv_stride,
                          kv_stride, kv_end - (kv0 + kBc));
      load_tile_async<HD>(v_tiles + nxt * FlashSmem<HD>::kTile, v_base + size_t(kv0 + kBc) * kv_stride,
                          kv_stride, kv_end - (kv0 + kBc));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        ldmatrix_x4(qf[kk], q_tile + (warp * 16 + (lane & 15)) * kPitch + kk * 16 + (lane >> 4) * 8);
    }
    const bf16* kt = k_tiles + (j & 1) * FlashSmem<HD>::kTile;
    const bf16* vt = v_tiles + (j & 1) * FlashSmem<HD>::kTile;

    // S = Q K^T for this warp's 16 rows x 64 keys: 8 n-tiles of 8 keys.
    float s[kBc / 8][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int p = 0; p < kBc / 16; ++p) {
        uint32_t b[4];
        const int mat = lane >> 3;
        ldmatrix_x4(b, kt + (p * 16 + (mat >> 1) * 8 + (lane & 7)) * kPitch + kk * 16 + (mat & 1) * 8);
        mma_bf16_16816(s[2 * p], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
        mma_bf16_16816(s[2 * p + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
      }
    }
    // Scale into the log2 domain; mask keys past the row (causal) or the end.
    const bool needs_mask = kv0 + kBc > q0 || kv0 + kBc > len;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kv0 + n * 8 + 2 * t + (e & 1);
        const int row = e < 2 ? row_a : row_b;
        s[n][e] *= scale_log2;
        if (needs_mask && (key > row || key >= len)) s[n][e] = -INFINITY;
      }
    }
    // Online softmax; rows are shared by the 4 threads of a quad.
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
      const float m_new = fmaxf(m_run[h], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: no NaN
      corr[h] = exp2f(m_run[h] - m_use);
      m_run[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
        s[n][2 * h] = exp2f(s[n][2 * h] - m_use);
        s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] - m_use);
        sum += s[n][2 * h] + s[n][2 * h + 1];
      }
      l_run[h] = l_run[h] * corr[h] + sum;
    }
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) {
      o[d][0] *= corr[0];
      o[d][1] *= corr[0];
      o[d][2] *= corr[1];
      o[d][3] *= corr[1];
    }
    // O += P V: P fragments come straight from the S accumulators.
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      const uint32_t a0 = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      const uint32_t a1 = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        uint32_t b[4];
        const int mat = lane >> 3;
        ldmatrix_x4_trans(b, vt + (kk * 16 + (mat & 1) * 8 + (lane & 7)) * kPitch + dp * 16 + (mat >> 1) * 8);
        mma_bf16_16816(o[2 * dp], a0, a1, a2, a3, b[0], b[1]);
        mma_bf16_16816(o[2 * dp + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

  // Normalise and write this thread's rows (out may alias q: only this block
  // read these rows of this head, and that was before the loop).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = h == 0 ? row_a : row_b;
    if (row < len) {
      bf16* dst = out + size_t(first + row) * q_stride + size_t(head) * HD + 2 * t;
#pragma unroll
      for (int d = 0; d < kDTiles; ++d)
        *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
            __floats2bfloat162_rn(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
    }
  }
}

bool flash_supports(const AttentionPrefillArgs& a) {
  const bool hd_ok = a.head_dim == 32 || a.head_dim == 64 || a.head_dim == 128;
  return hd_ok && a.q_stride % 8 == 0 && a.kv_stride % 8 == 0 && aligned(a.q, 16) &&
         aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.out, 16);
}

template <int HD>
void launch_flash(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  constexpr size_t smem = FlashSmem<HD>::kBytes;
  static const bool smem_raised = [] {
    CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<HD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)smem_raised;
  const dim3 grid(ceil_div(a.max_seq_len, kBr), a.n_q_heads, a.num_seqs);
  const float log2e = 1.4426950408889634f;
  flash_prefill_kernel<HD><<<grid, kFlashThreads, smem, ctx.stream>>>(
      static_cast<const bf16*>(a.q), static_cast<const bf16*>(a.k), static_cast<const bf16*>(a.v),
      static_cast<bf16*>(a.out), a.seq_starts, a.q_stride, a.kv_stride, a.n_q_heads / a.n_kv_heads,
      a.scale * log2e);
  CUDA_CHECK_LAST("flash_prefill_kernel");
}

size_t prefill_flash_workspace(const WorkspaceShape& s) {
  // Unsupported head_dim: room for the seed fallback.
  const bool hd_ok = s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128;
  return hd_ok ? 0 : prefill_seed_workspace(s);
}

void prefill_flash(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  check_prefill(a, "attention_prefill.flash_mma");
  if (a.num_seqs == 0 || a.max_seq_len == 0) return;
  if (!flash_supports(a)) {
    LANTERN_CHECK(a.host_seq_starts && ctx.cublas,
                  "attention_prefill.flash_mma: head_dim %d (supported: 32, 64, 128) or unaligned "
                  "rows, and no host_seq_starts / cuBLAS handle for the seed fallback",
                  a.head_dim);
    return prefill_seed(a, ctx);
  }
  LANTERN_CHECK(a.num_seqs <= 65535 && a.n_q_heads <= 65535,
                "attention_prefill.flash_mma: %d sequences x %d heads exceed the grid", a.num_seqs,
                a.n_q_heads);
  switch (a.head_dim) {
    case 32: return launch_flash<32>(a, ctx);
    case 64: return launch_flash<64>(a, ctx);
    default: return launch_flash<128>(a, ctx);
  }
}

}  // namespace

void register_attention_prefill_cuda(Registry& r) {
  r.add(make_entry<AttentionPrefillArgs, prefill_seed, attention_prefill_cost<2>>(
      1, "seed", Backend::cuda,
      "per-head cuBLAS GEMMs (strided-batched over kv heads) + causal softmax kernel + GEMM with V",
      kTestedOnly, prefill_seed_workspace));
  r.add(make_entry<AttentionPrefillArgs, prefill_flash, attention_prefill_cost<2>>(
      2, "flash_mma", Backend::cuda,
      "fused flash attention: mma.m16n8k16 bf16, online softmax, cp.async double-buffered K/V",
      kPreferred, prefill_flash_workspace));
}

}  // namespace lantern::kernels
