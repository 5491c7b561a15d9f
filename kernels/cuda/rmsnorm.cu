// rmsnorm: out[i] = x[row(i)] * rsqrt(mean(x[row(i)]^2) + eps) * weight, fp32 math.
//
// Variant 1 (seed): one 256-thread block per row; scalar loads, a block
//   reduction of the sum of squares, then a second pass over the row (L1/L2).
// Variant 2 (warp_vec): one warp per row, 16-byte loads, the row held in
//   registers between the reduction and the scaling (one DRAM read of x), the
//   weight loaded together with x (one round trip), warp shuffles only (no
//   shared memory, no block barrier). Rows of up to 4096
//   elements with hidden % 8 == 0 stay in registers; other shapes take a
//   two-pass warp loop.
// Both read the whole row before writing it, so out may alias x (rows == nullptr).
// Variant 3 (warp_vec_pdl): variant 2's kernel launched with programmatic
//   dependent launch (kernels/cuda/cuda_common.cuh): its blocks start while the
//   previous kernel drains and wait at griddepcontrol.wait before reading; every
//   variant's kernel triggers its dependents early (no effect on results).
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

void check_rmsnorm(const RmsnormArgs& a, const char* who) {
  LANTERN_CHECK(a.n >= 0 && a.hidden > 0, "%s: bad shape n=%d hidden=%d", who, a.n, a.hidden);
}

// ------------------------------------------------------------------ variant 1
__global__ void rmsnorm_block_kernel(const bf16* __restrict__ x, const bf16* __restrict__ weight,
                                     bf16* out, const int32_t* __restrict__ rows, int hidden,
                                     float eps) {
  __shared__ float scratch[32];
  const int i = blockIdx.x;
  const bf16* xr = x + size_t(rows ? rows[i] : i) * hidden;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float v = __bfloat162float(xr[j]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv_rms = 1.0f / sqrtf(ss / hidden + eps);
  bf16* o = out + size_t(i) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x)
    o[j] = __float2bfloat16(__bfloat162float(xr[j]) * inv_rms * __bfloat162float(weight[j]));
}

void rmsnorm_seed(const RmsnormArgs& a, const LaunchCtx& ctx) {
  check_rmsnorm(a, "rmsnorm.seed");
  if (a.n == 0) return;
  rmsnorm_block_kernel<<<a.n, 256, 0, ctx.stream>>>(
      static_cast<const bf16*>(a.x), static_cast<const bf16*>(a.weight), static_cast<bf16*>(a.out),
      a.rows, a.hidden, a.eps);
  CUDA_CHECK_LAST("rmsnorm_block_kernel");
}

// ------------------------------------------------------------------ variant 2
constexpr int kRowsPerBlock = 4;  // warps per block, one row each

// kVecs 16-byte vectors per lane: hidden == 256 * kVecs... or less (masked).
template <int kVecs>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    rmsnorm_warp_reg_kernel(const bf16* x, const bf16* __restrict__ weight, bf16* out,
                            const int32_t* __restrict__ rows, int n, int hidden, float eps) {
  trigger_dependents();    // a PDL-launched GEMV may start streaming its weights now
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  const int lane = threadIdx.x % kWarp;
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (i >= n) return;
  const int vecs = hidden / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + size_t(rows ? rows[i] : i) * hidden);
  // x and the weight are both loaded up front: one memory round trip, not two.
  const uint4* w = reinterpret_cast<const uint4*>(weight);
  uint4 xv[kVecs], wv[kVecs];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int idx = c * kWarp + lane;
    xv[c] = wv[c] = make_uint4(0, 0, 0, 0);
    if (idx < vecs) {
      xv[c] = xr[idx];
      wv[c] = w[idx];
    }
  }
  float v[kVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    unpack8(xv[c], v[c]);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
  }
  warp_rmsnorm_store<kVecs>(v, wv, ss, hidden, eps, out + size_t(i) * hidden, lane);
}

// Any hidden: two passes over the row (the second from L1/L2).
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    rmsnorm_warp_loop_kernel(const bf16* x, const bf16* __restrict__ weight, bf16* out,
                             const int32_t* __restrict__ rows, int n, int hidden, float eps) {
  trigger_dependents();    // a PDL-launched GEMV may start streaming its weights now
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  const int lane = threadIdx.x % kWarp;
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (i >= n) return;
  const bf16* xr = x + size_t(rows ? rows[i] : i) * hidden;
  float ss = 0.0f;
  for (int j = lane; j < hidden; j += kWarp) {
    const float v = __bfloat162float(xr[j]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / hidden + eps);
  bf16* o = out + size_t(i) * hidden;
  for (int j = lane; j < hidden; j += kWarp)
    o[j] = __float2bfloat16(__bfloat162float(xr[j]) * inv_rms * __bfloat162float(weight[j]));
}

void rmsnorm_warp_vec_impl(const RmsnormArgs& a, const LaunchCtx& ctx, bool pdl) {
  check_rmsnorm(a, pdl ? "rmsnorm.warp_vec_pdl" : "rmsnorm.warp_vec");
  if (a.n == 0) return;
  const auto* x = static_cast<const bf16*>(a.x);
  const auto* w = static_cast<const bf16*>(a.weight);
  auto* out = static_cast<bf16*>(a.out);
  const int blocks = ceil_div(a.n, kRowsPerBlock), threads = kRowsPerBlock * kWarp;
  const bool vec = a.hidden % 8 == 0 && aligned(x, 16) && aligned(w, 16) && aligned(out, 16);
  const int lane_vecs = ceil_div(a.hidden / 8, kWarp);  // 16-byte vectors per lane
#define LANTERN_RMSNORM_REG(V)                                                                     \
  launch_kernel(pdl, rmsnorm_warp_reg_kernel<V>, dim3(blocks), dim3(threads), 0, ctx.stream, x, w, \
                out, a.rows, a.n, a.hidden, a.eps)
  if (vec && lane_vecs <= 1) LANTERN_RMSNORM_REG(1);
  else if (vec && lane_vecs <= 2) LANTERN_RMSNORM_REG(2);
  else if (vec && lane_vecs <= 4) LANTERN_RMSNORM_REG(4);
  else if (vec && lane_vecs <= 8) LANTERN_RMSNORM_REG(8);
  else if (vec && lane_vecs <= 16) LANTERN_RMSNORM_REG(16);
  else
    launch_kernel(pdl, rmsnorm_warp_loop_kernel, dim3(blocks), dim3(threads), 0, ctx.stream, x, w,
                  out, a.rows, a.n, a.hidden, a.eps);
#undef LANTERN_RMSNORM_REG
  CUDA_CHECK_LAST("rmsnorm_warp kernel");
}

void rmsnorm_warp_vec(const RmsnormArgs& a, const LaunchCtx& ctx) {
  rmsnorm_warp_vec_impl(a, ctx, false);
}
void rmsnorm_warp_vec_pdl(const RmsnormArgs& a, const LaunchCtx& ctx) {
  rmsnorm_warp_vec_impl(a, ctx, true);
}

}  // namespace

void register_rmsnorm_cuda(Registry& r) {
  r.add(make_entry<RmsnormArgs, rmsnorm_seed, rmsnorm_cost<2>>(
      1, "seed", Backend::cuda, "one block per row, block reduction, second pass over the row",
      kTestedOnly));
  r.add(make_entry<RmsnormArgs, rmsnorm_warp_vec, rmsnorm_cost<2>>(
      2, "warp_vec", Backend::cuda,
      "one warp per row, 16-byte loads, row kept in registers (one read of x), shuffles only",
      kTestedOnly));
  r.add(make_entry<RmsnormArgs, rmsnorm_warp_vec_pdl, rmsnorm_cost<2>>(
      3, "warp_vec_pdl", Backend::cuda,
      "warp_vec launched with programmatic dependent launch: its blocks are scheduled while the "
      "previous kernel finishes and wait (griddepcontrol.wait) before reading",
      kPreferred));
}

}  // namespace lantern::kernels
