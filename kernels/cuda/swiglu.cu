// swiglu: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, fp32 math on
// bf16 activations (the CPU reference's formula, finite at both ends).
//
// Variant 1 (seed): grid-stride loop, 16-byte vectors when the shape allows.
// Both read gate/up rows `SwigluArgs::row_stride()` apart (the fused gate/up
// projection's [n, 2 * inter] output) and write dense rows.
// Variant 2 (seed_pdl): variant 1's kernel launched with programmatic
//   dependent launch (kernels/cuda/cuda_common.cuh): its blocks start while the
//   previous kernel drains and wait at griddepcontrol.wait before reading; every
//   variant's kernel triggers its dependents early (no effect on results).
#include <algorithm>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

// Rows of `row_vecs` 16-byte vectors; gate/up rows are `stride_vecs` apart
// (the fused gate/up output: 2 * inter), out rows are dense.
__global__ void swiglu_vec_kernel(const uint4* __restrict__ gate, const uint4* __restrict__ up,
                                  uint4* __restrict__ out, size_t vecs, int row_vecs, int stride_vecs) {
  trigger_dependents();    // a PDL-launched down_proj GEMV may start streaming its weights now
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vecs;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t in = i / row_vecs * stride_vecs + i % row_vecs;
    float g[8], u[8];
    unpack8(gate[in], g);
    unpack8(up[in], u);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = silu_mul(g[j], u[j]);
    out[i] = pack8(g);
  }
}

__global__ void swiglu_scalar_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                     bf16* __restrict__ out, size_t count, int inter, int stride) {
  trigger_dependents();
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t in = i / inter * stride + i % inter;
    out[i] = __float2bfloat16(silu_mul(__bfloat162float(gate[in]), __bfloat162float(up[in])));
  }
}

}  // namespace

void swiglu_launch(const SwigluArgs& a, const LaunchCtx& ctx, bool pdl) {
  using namespace cuda_detail;
  LANTERN_CHECK(a.n >= 0 && a.inter > 0, "swiglu.seed: bad shape n=%d inter=%d", a.n, a.inter);
  const int stride = a.row_stride();
  LANTERN_CHECK(stride >= a.inter, "swiglu.seed: row stride %d < inter %d", stride, a.inter);
  const size_t count = size_t(a.n) * a.inter;
  if (count == 0) return;
  const int threads = 256;
  if (a.inter % 8 == 0 && stride % 8 == 0 && aligned(a.gate, 16) && aligned(a.up, 16) && aligned(a.out, 16)) {
    const size_t vecs = count / 8;
    const int blocks = static_cast<int>(std::min<size_t>((vecs + threads - 1) / threads, 132 * 16));
    launch_kernel(pdl, swiglu_vec_kernel, dim3(blocks), dim3(threads), 0, ctx.stream,
                  static_cast<const uint4*>(a.gate), static_cast<const uint4*>(a.up),
                  static_cast<uint4*>(a.out), vecs, a.inter / 8, stride / 8);
    CUDA_CHECK_LAST("swiglu_vec_kernel");
  } else {
    const int blocks = static_cast<int>(std::min<size_t>((count + threads - 1) / threads, 132 * 16));
    launch_kernel(pdl, swiglu_scalar_kernel, dim3(blocks), dim3(threads), 0, ctx.stream,
                  static_cast<const bf16*>(a.gate), static_cast<const bf16*>(a.up),
                  static_cast<bf16*>(a.out), count, a.inter, stride);
    CUDA_CHECK_LAST("swiglu_scalar_kernel");
  }
}

namespace {

void swiglu_seed(const SwigluArgs& a, const LaunchCtx& ctx) {
  swiglu_launch(a, ctx, false);
}
void swiglu_pdl(const SwigluArgs& a, const LaunchCtx& ctx) {
  swiglu_launch(a, ctx, true);
}

}  // namespace

void register_swiglu_cuda(Registry& r) {
  r.add(make_entry<SwigluArgs, swiglu_seed, swiglu_cost<2>>(
      1, "seed", Backend::cuda, "grid-stride silu(g)*u in fp32, 16-byte vectors when aligned",
      kTestedOnly));
  r.add(make_entry<SwigluArgs, swiglu_pdl, swiglu_cost<2>>(
      2, "seed_pdl", Backend::cuda,
      "seed launched with programmatic dependent launch: its blocks are scheduled while the "
      "previous kernel finishes and wait (griddepcontrol.wait) before reading",
      kPreferred));
}

}  // namespace lantern::kernels
