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
// Variant 3 (flash_pair, attention_prefill_pair.cu): variant 2's warp step with
//   balanced blocks (16-row query tiles paired heavy + light, the GQA group's q
//   heads sharing each K/V tile, the keys split over warps); falls back to 2.
// Variant 4 (wg_flash, the default since session 22; sm90a/attention_prefill_wgmma.cu): variant 2's blocks on
//   Hopper's warpgroup MMA -- Q and a K/V ring filled by the copy engine, S = Q
//   K^T and O += P V as wgmma, the key tiles split between two warpgroups and
//   merged in a fixed order; head_dim 64 on an sm_90 GPU, else variant 2.
// Variant 5 (wg_flash_pipe, same file): variant 4 with each warpgroup's key
//   tiles pipelined (S of tile i issued with P V of tile i - 1, the softmax of
//   tile i under it); bit-identical to variant 4.
#include <algorithm>
#include <vector>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/flash_prefill_tile.cuh"
#include "kernels/cuda/sm90a/sm90a.h"

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
constexpr int kBr = 64, kBc = kFlashKeys;  // query rows, keys per tile
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;

template <int HD>
struct FlashSmem {
  static constexpr int kTile = kBr * FlashTile<HD>::kPitch;
  static constexpr size_t kBytes = size_t(5) * kTile * sizeof(bf16);  // Q, K[2], V[2]
};

template <int HD>
__global__ void __launch_bounds__(kFlashThreads, 2)
    flash_prefill_kernel(const bf16* q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                         bf16* out, const int32_t* __restrict__ seq_starts, int q_stride,
                         int kv_stride, int group, float scale_log2) {
  constexpr int kTile = FlashSmem<HD>::kTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_tile = reinterpret_cast<bf16*>(smem_raw);
  bf16* k_tiles = q_tile + kTile;      // [2][tile]
  bf16* v_tiles = k_tiles + 2 * kTile;  // [2][tile]

  const int seq = blockIdx.z, head = blockIdx.y, kv_head = head / group;
  const int first = seq_starts[seq], len = seq_starts[seq + 1] - first;
  const int tile_idx = gridDim.x - 1 - blockIdx.x;  // heaviest (last) tiles start first
  const int q0 = tile_idx * kBr;
  if (q0 >= len) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

  const bf16* q_base = q + size_t(first + q0) * q_stride + size_t(head) * HD;
  const bf16* k_base = k + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const bf16* v_base = v + size_t(first) * kv_stride + size_t(kv_head) * HD;
  const int kv_end = min(len, q0 + kBr);  // causal: no key beyond the tile's last row
  const int n_tiles = (kv_end + kBc - 1) / kBc;

  load_rows_async<HD, kFlashThreads>(q_tile, q_base, q_stride, kBr, len - q0);
  load_rows_async<HD, kFlashThreads>(k_tiles, k_base, kv_stride, kBc, kv_end);
  load_rows_async<HD, kFlashThreads>(v_tiles, v_base, kv_stride, kBc, kv_end);
  cp_async_commit();

  uint32_t qf[HD / 16][4];
  FlashRows<HD> st;
  st.reset();
  const int row_a = q0 + warp * 16 + lane / 4, row_b = row_a + 8;  // this thread's two query rows

  for (int j = 0; j < n_tiles; ++j) {
    const int kv0 = j * kBc;
    if (j + 1 < n_tiles) {
      const int nxt = (j + 1) & 1;
      load_rows_async<HD, kFlashThreads>(k_tiles + nxt * kTile, k_base + size_t(kv0 + kBc) * kv_stride,
                                         kv_stride, kBc, kv_end - (kv0 + kBc));
      load_rows_async<HD, kFlashThreads>(v_tiles + nxt * kTile, v_base + size_t(kv0 + kBc) * kv_stride,
                                         kv_stride, kBc, kv_end - (kv0 + kBc));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) load_q_fragments<HD>(qf, q_tile + warp * 16 * FlashTile<HD>::kPitch, lane);
    // Only the diagonal tile (and one past the end) needs the mask.
    const bool needs_mask = kv0 + kBc > q0 || kv0 + kBc > len;
    flash_step<HD>(st, qf, k_tiles + (j & 1) * kTile, v_tiles + (j & 1) * kTile, kv0, row_a, row_b,
                   len, needs_mask, scale_log2, lane);
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }
  // out may alias q: only this block read these rows of this head, before the loop.
  flash_store_rows<HD>(st, out + size_t(first) * q_stride + size_t(head) * HD, q_stride, row_a, len,
                       lane);
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

// Variants 4 and 5: the wgmma kernel where it fits, else variant 2.
template <bool kPipelined>
void prefill_wg(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  const char* who = kPipelined ? "attention_prefill.wg_flash_pipe" : "attention_prefill.wg_flash";
  check_prefill(a, who);
  if (a.num_seqs == 0 || a.max_seq_len == 0) return;
  LANTERN_CHECK(a.num_seqs <= 65535 && a.n_q_heads <= 65535, "%s: %d sequences x %d heads exceed the grid", who,
                a.num_seqs, a.n_q_heads);
  if (!attention_prefill_wg_launch(a, ctx, kPipelined)) prefill_flash(a, ctx);
}

}  // namespace

void attention_prefill_check(const AttentionPrefillArgs& a, const char* who) {
  check_prefill(a, who);
}
void attention_prefill_flash(const AttentionPrefillArgs& a, const LaunchCtx& ctx) {
  prefill_flash(a, ctx);
}
size_t attention_prefill_flash_workspace(const WorkspaceShape& s) {
  return prefill_flash_workspace(s);
}

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

// After variant 3 (attention_prefill_pair.cu), so the family lists in order.
void register_attention_prefill_wg_cuda(Registry& r) {
  r.add(make_entry<AttentionPrefillArgs, prefill_wg<false>, attention_prefill_cost<2>>(
      4, "wg_flash", Backend::cuda,
      "variant 2's blocks on wgmma: TMA-filled Q and K/V ring, S = QK^T and O += PV as warpgroup MMAs, key tiles "
      "split over two warpgroups (head_dim 64, sm_90; else variant 2)",
      kPreferred, prefill_flash_workspace));  // the default since session 22
  r.add(make_entry<AttentionPrefillArgs, prefill_wg<true>, attention_prefill_cost<2>>(
      5, "wg_flash_pipe", Backend::cuda,
      "variant 4 with the key tiles pipelined in each warpgroup: S = QK^T of tile i issued with O += PV of tile "
      "i - 1, tile i's softmax under that PV (FA3's intra-warpgroup overlap); bit-identical to variant 4",
      kTestedOnly, prefill_flash_workspace));  // level with 4 on the H200 (session 32)
}

}  // namespace lantern::kernels
