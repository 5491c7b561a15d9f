// rope: in-place rotary embedding of q and k, HF rotate-half convention (pair
// (j, j + head_dim/2), angle = pos * inv_freq[j], llama3 scaling already in
// inv_freq). Prefill and decode call the same kernel, so they cannot disagree.
//
// Variant 1 (seed, corrected): one block per token. The block first computes
//   cos/sin of its head_dim/2 angles in double (pos * inv_freq is exact there;
//   float angles of ~1e5 rad at long positions would lose ~3 digits), then
//   rotates every (head, pair) of q and k with fp32 math.
// Limit: head_dim even and <= 1024.
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kMaxHalf = 512;

__global__ void rope_kernel(bf16* q, bf16* k, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int n_q_heads, int n_kv_heads,
                            int head_dim, int q_stride, int k_stride) {
  __shared__ float cos_t[kMaxHalf], sin_t[kMaxHalf];
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  const double pos = positions[t];
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double s, c;
    sincos(pos * double(inv_freq[j]), &s, &c);
    cos_t[j] = float(c);
    sin_t[j] = float(s);
  }
  __syncthreads();
  const int pairs = (n_q_heads + n_kv_heads) * half;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int h = p / half, j = p % half;
    bf16* xh = h < n_q_heads ? q + size_t(t) * q_stride + size_t(h) * head_dim
                             : k + size_t(t) * k_stride + size_t(h - n_q_heads) * head_dim;
    const float x0 = __bfloat162float(xh[j]), x1 = __bfloat162float(xh[j + half]);
    xh[j] = __float2bfloat16(x0 * cos_t[j] - x1 * sin_t[j]);
    xh[j + half] = __float2bfloat16(x1 * cos_t[j] + x0 * sin_t[j]);
  }
}

void rope_seed(const RopeArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim / 2 <= kMaxHalf,
                "rope.seed: head_dim must be even and at most %d, got %d", 2 * kMaxHalf,
                a.head_dim);
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * a.head_dim && a.k_stride >= a.n_kv_heads * a.head_dim,
                "rope.seed: strides (%d, %d) are smaller than the heads they hold (%d, %d)",
                a.q_stride, a.k_stride, a.n_q_heads * a.head_dim, a.n_kv_heads * a.head_dim);
  if (a.n == 0) return;
  rope_kernel<<<a.n, 128, 0, ctx.stream>>>(static_cast<bf16*>(a.q), static_cast<bf16*>(a.k),
                                           a.positions, a.inv_freq, a.n_q_heads, a.n_kv_heads,
                                           a.head_dim, a.q_stride, a.k_stride);
  CUDA_CHECK_LAST("rope_kernel");
}

}  // namespace

void register_rope_cuda(Registry& r) {
  r.add(make_entry<RopeArgs, rope_seed, rope_cost<2>>(
      1, "seed", Backend::cuda,
      "one block per token: sin/cos in double into shared memory, rotate-half on q and k",
      kPreferred));
}

}  // namespace lantern::kernels
