// rope: in-place rotary embedding of q and k, HF rotate-half convention (pair
// (j, j + head_dim/2), angle = pos * inv_freq[j], llama3 scaling already in
// inv_freq). Prefill and decode call the same kernel, so they cannot disagree.
//
// Variant 1 (seed, corrected): one block per token. The block first computes
//   cos/sin of its head_dim/2 angles in double (pos * inv_freq is exact there;
//   float angles of ~1e5 rad at long positions would lose ~3 digits), then
//   rotates every (head, pair) of q and k with fp32 math.
// Variant 3 (vec_pdl): see rope_vec_kernel: 16-byte halves loaded before the
//   sin/cos, one round trip per token; PDL.
// Limit: head_dim even and <= 1024.
// Variant 2 (seed_pdl): variant 1's kernel launched with programmatic
//   dependent launch (kernels/cuda/cuda_common.cuh): its blocks start while the
//   previous kernel drains and wait at griddepcontrol.wait before reading; every
//   variant's kernel triggers its dependents early (no effect on results).
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
  trigger_dependents();
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
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
    float y0, y1;
    rope_rotate(x0, x1, cos_t[j], sin_t[j], y0, y1);
    xh[j] = __float2bfloat16(y0);
    xh[j + half] = __float2bfloat16(y1);
  }
}

void rope_impl(const RopeArgs& a, const LaunchCtx& ctx, bool pdl) {
  LANTERN_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim / 2 <= kMaxHalf,
                "rope.seed: head_dim must be even and at most %d, got %d", 2 * kMaxHalf,
                a.head_dim);
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * a.head_dim && a.k_stride >= a.n_kv_heads * a.head_dim,
                "rope.seed: strides (%d, %d) are smaller than the heads they hold (%d, %d)",
                a.q_stride, a.k_stride, a.n_q_heads * a.head_dim, a.n_kv_heads * a.head_dim);
  if (a.n == 0) return;
  launch_kernel(pdl, rope_kernel, dim3(a.n), dim3(128), 0, ctx.stream, static_cast<bf16*>(a.q),
                static_cast<bf16*>(a.k), a.positions, a.inv_freq, a.n_q_heads, a.n_kv_heads,
                a.head_dim, a.q_stride, a.k_stride);
  CUDA_CHECK_LAST("rope_kernel");
}

// Variant 3: one block per token, one thread per (head, 8 dims of the first
// half). The thread's two 16-byte vectors (dims d..d+7 and d+half..) are loaded
// BEFORE the block computes its sin/cos, so the token costs one memory round
// trip instead of a dependent 2-byte load/store per pair and step; same fp32
// formulas as variant 1 (bit-identical results).
constexpr int kRopeVecThreads = 256;

__global__ void __launch_bounds__(kRopeVecThreads)
    rope_vec_kernel(bf16* q, bf16* k, const int32_t* __restrict__ positions,
                    const float* __restrict__ inv_freq, int n_q_heads, int n_kv_heads, int head_dim,
                    int q_stride, int k_stride) {
  __shared__ float cos_t[kMaxHalf], sin_t[kMaxHalf];
  trigger_dependents();
  const int half = head_dim / 2, vecs = half / 8;
  const int items = (n_q_heads + n_kv_heads) * vecs;
  grid_dependency_wait();  // q, k and positions come from earlier kernels
  const int t = blockIdx.x;
  auto row = [&](int item) {
    const int h = item / vecs, c = item % vecs;
    return (h < n_q_heads ? q + size_t(t) * q_stride + size_t(h) * head_dim
                          : k + size_t(t) * k_stride + size_t(h - n_q_heads) * head_dim) +
           c * 8;
  };
  const int first = threadIdx.x;
  uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
  if (first < items) {
    lo = *reinterpret_cast<const uint4*>(row(first));
    hi = *reinterpret_cast<const uint4*>(row(first) + half);
  }
  const double pos = positions[t];
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double sn, cs;
    sincos(pos * double(inv_freq[j]), &sn, &cs);
    cos_t[j] = float(cs);
    sin_t[j] = float(sn);
  }
  __syncthreads();
  for (int item = first; item < items; item += blockDim.x) {
    if (item != first) {
      lo = *reinterpret_cast<const uint4*>(row(item));
      hi = *reinterpret_cast<const uint4*>(row(item) + half);
    }
    const int j0 = (item % vecs) * 8;
    float x0[8], x1[8], y0[8], y1[8];
    unpack8(lo, x0);
    unpack8(hi, x1);
#pragma unroll
    for (int e = 0; e < 8; ++e) rope_rotate(x0[e], x1[e], cos_t[j0 + e], sin_t[j0 + e], y0[e], y1[e]);
    *reinterpret_cast<uint4*>(row(item)) = pack8(y0);
    *reinterpret_cast<uint4*>(row(item) + half) = pack8(y1);
  }
}

void rope_vec(const RopeArgs& a, const LaunchCtx& ctx) {
  const bool fits = a.head_dim % 16 == 0 && a.head_dim / 2 <= kMaxHalf && a.q_stride % 8 == 0 &&
                    a.k_stride % 8 == 0 && aligned(a.q, 16) && aligned(a.k, 16);
  if (!fits) return rope_impl(a, ctx, true);  // variant 2 (checks the shape)
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * a.head_dim && a.k_stride >= a.n_kv_heads * a.head_dim,
                "rope.vec_pdl: strides (%d, %d) are smaller than the heads they hold (%d, %d)",
                a.q_stride, a.k_stride, a.n_q_heads * a.head_dim, a.n_kv_heads * a.head_dim);
  if (a.n == 0) return;
  launch_kernel(true, rope_vec_kernel, dim3(a.n), dim3(kRopeVecThreads), 0, ctx.stream,
                static_cast<bf16*>(a.q), static_cast<bf16*>(a.k), a.positions, a.inv_freq,
                a.n_q_heads, a.n_kv_heads, a.head_dim, a.q_stride, a.k_stride);
  CUDA_CHECK_LAST("rope_vec_kernel");
}

void rope_seed(const RopeArgs& a, const LaunchCtx& ctx) {
  rope_impl(a, ctx, false);
}
void rope_pdl(const RopeArgs& a, const LaunchCtx& ctx) {
  rope_impl(a, ctx, true);
}

}  // namespace

void register_rope_cuda(Registry& r) {
  r.add(make_entry<RopeArgs, rope_seed, rope_cost<2>>(
      1, "seed", Backend::cuda,
      "one block per token: sin/cos in double into shared memory, rotate-half on q and k",
      kTestedOnly));
  r.add(make_entry<RopeArgs, rope_pdl, rope_cost<2>>(
      2, "seed_pdl", Backend::cuda,
      "seed launched with programmatic dependent launch: its blocks are scheduled while the "
      "previous kernel finishes and wait (griddepcontrol.wait) before reading",
      kTestedOnly));
  r.add(make_entry<RopeArgs, rope_vec, rope_cost<2>>(
      3, "vec_pdl", Backend::cuda,
      "one thread per (head, 8 dims): both 16-byte halves loaded before sin/cos (one round trip), "
      "PDL; variant 2 for head_dim % 16 != 0 or unaligned rows",
      kPreferred));
}

}  // namespace lantern::kernels
