// add_rmsnorm: the residual add fused with the RMSNorm that follows it
// (attn_residual + mlp_norm, mlp_residual + the next layer's attn_norm): one
// launch and one read of the residual stream instead of two launches, x read
// twice and written once.
//
// x_new = bf16(x + y) is written back and the norm is taken over the ROUNDED
// x_new, so the result equals residual.* followed by rmsnorm.* (the
// definition, and what the CPU reference runs) up to the order of the fp32
// sum of squares.
//
// Variant 1 (warp_vec_pdl): rmsnorm.3's shape — one warp per row, 16-byte
//   loads of x, y and the weight issued together (one round trip), the row in
//   registers, shuffles only; hidden % 8 == 0 and <= 4096 with aligned rows,
//   else a two-pass warp loop (the second pass re-reads the updated x from
//   L1/L2). Launched with programmatic dependent launch.
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kRowsPerBlock = 4;  // warps per block, one row each

template <int kVecs>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    add_rmsnorm_reg_kernel(bf16* x, const bf16* y, const bf16* __restrict__ weight, bf16* out, int n,
                           int hidden, float eps) {
  trigger_dependents();    // the next GEMV may start streaming its weights now
  const int lane = threadIdx.x % kWarp;
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int vecs = hidden / 8;
  uint4 wv[kVecs];
  const uint4* w = reinterpret_cast<const uint4*>(weight);
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {  // the weight is constant: read before the wait
    const int idx = c * kWarp + lane;
    wv[c] = idx < vecs ? w[idx] : make_uint4(0, 0, 0, 0);
  }
  grid_dependency_wait();  // x and y come from earlier kernels
  if (i >= n) return;
  uint4* xr = reinterpret_cast<uint4*>(x + size_t(i) * hidden);
  const uint4* yr = reinterpret_cast<const uint4*>(y + size_t(i) * hidden);
  uint4 xv[kVecs], yv[kVecs];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int idx = c * kWarp + lane;
    xv[c] = yv[c] = make_uint4(0, 0, 0, 0);
    if (idx < vecs) {
      xv[c] = xr[idx];
      yv[c] = yr[idx];
    }
  }
  float v[kVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    float b[8];
    unpack8(xv[c], v[c]);
    unpack8(yv[c], b);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[c][e] += b[e];
    xv[c] = pack8(v[c]);  // the residual stream, rounded as residual.* rounds it
    unpack8(xv[c], v[c]);  // ... and the norm reads the rounded values, as rmsnorm.* would
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
    const int idx = c * kWarp + lane;
    if (idx < vecs) xr[idx] = xv[c];
  }
  warp_rmsnorm_store<kVecs>(v, wv, ss, hidden, eps, out + size_t(i) * hidden, lane);
}

// Any hidden: pass 1 adds, writes x and sums squares; pass 2 re-reads x (the
// lane's own writes, so no barrier is needed) and normalises.
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    add_rmsnorm_loop_kernel(bf16* x, const bf16* y, const bf16* __restrict__ weight, bf16* out, int n,
                            int hidden, float eps) {
  trigger_dependents();
  grid_dependency_wait();
  const int lane = threadIdx.x % kWarp;
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (i >= n) return;
  bf16* xr = x + size_t(i) * hidden;
  const bf16* yr = y + size_t(i) * hidden;
  float ss = 0.0f;
  for (int j = lane; j < hidden; j += kWarp) {
    const bf16 s = __float2bfloat16(__bfloat162float(xr[j]) + __bfloat162float(yr[j]));
    xr[j] = s;
    const float v = __bfloat162float(s);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / hidden + eps);
  bf16* o = out + size_t(i) * hidden;
  for (int j = lane; j < hidden; j += kWarp)
    o[j] = __float2bfloat16(__bfloat162float(xr[j]) * inv_rms * __bfloat162float(weight[j]));
}

}  // namespace

void add_rmsnorm_launch(const AddRmsnormArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.n >= 0 && a.hidden > 0, "add_rmsnorm.warp_vec_pdl: bad shape n=%d hidden=%d", a.n,
                a.hidden);
  LANTERN_CHECK(a.out != a.x && a.out != a.y, "add_rmsnorm.warp_vec_pdl: out must not alias x or y");
  if (a.n == 0) return;
  auto* x = static_cast<bf16*>(a.x);
  const auto* y = static_cast<const bf16*>(a.y);
  const auto* w = static_cast<const bf16*>(a.weight);
  auto* out = static_cast<bf16*>(a.out);
  const int blocks = ceil_div(a.n, kRowsPerBlock), threads = kRowsPerBlock * kWarp;
  const bool vec = a.hidden % 8 == 0 && aligned(x, 16) && aligned(y, 16) && aligned(w, 16) &&
                   aligned(out, 16);
  const int lane_vecs = ceil_div(a.hidden / 8, kWarp);
#define LANTERN_ADD_RMSNORM_REG(V)                                                                     \
  launch_kernel(true, add_rmsnorm_reg_kernel<V>, dim3(blocks), dim3(threads), 0, ctx.stream, x, y, w, \
                out, a.n, a.hidden, a.eps)
  if (vec && lane_vecs <= 1) LANTERN_ADD_RMSNORM_REG(1);
  else if (vec && lane_vecs <= 2) LANTERN_ADD_RMSNORM_REG(2);
  else if (vec && lane_vecs <= 4) LANTERN_ADD_RMSNORM_REG(4);
  else if (vec && lane_vecs <= 8) LANTERN_ADD_RMSNORM_REG(8);
  else if (vec && lane_vecs <= 16) LANTERN_ADD_RMSNORM_REG(16);
  else
    launch_kernel(true, add_rmsnorm_loop_kernel, dim3(blocks), dim3(threads), 0, ctx.stream, x, y, w,
                  out, a.n, a.hidden, a.eps);
#undef LANTERN_ADD_RMSNORM_REG
  CUDA_CHECK_LAST("add_rmsnorm kernel");
}

void register_add_rmsnorm_cuda(Registry& r) {
  r.add(make_entry<AddRmsnormArgs, add_rmsnorm_launch, add_rmsnorm_cost<2>>(
      1, "warp_vec_pdl", Backend::cuda,
      "x += y and rmsnorm in one pass: one warp per row, x, y and the weight loaded together, the "
      "rounded sum kept in registers for the norm; PDL",
      kPreferred));
}

}  // namespace lantern::kernels
