// residual: x += y over bf16 activations (fp32 add, one rounding).
//
// Variant 1 (seed): grid-stride loop, 8 elements (16 bytes) per thread when the
// count and pointers allow it, scalar otherwise.
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

__global__ void residual_vec_kernel(uint4* __restrict__ x, const uint4* __restrict__ y,
                                    size_t vecs) {
  trigger_dependents();
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vecs;
       i += size_t(gridDim.x) * blockDim.x) {
    float a[8], b[8];
    unpack8(x[i], a);
    unpack8(y[i], b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] += b[j];
    x[i] = pack8(a);
  }
}

__global__ void residual_scalar_kernel(bf16* __restrict__ x, const bf16* __restrict__ y,
                                       size_t count) {
  trigger_dependents();
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(y[i]));
}

void residual_impl(const ResidualArgs& a, const LaunchCtx& ctx, bool pdl) {
  if (a.count == 0) return;
  const int threads = 256;
  if (a.count % 8 == 0 && aligned(a.x, 16) && aligned(a.y, 16)) {
    const size_t vecs = a.count / 8;
    const int blocks = static_cast<int>(std::min<size_t>((vecs + threads - 1) / threads, 132 * 16));
    launch_kernel(pdl, residual_vec_kernel, dim3(blocks), dim3(threads), 0, ctx.stream,
                  static_cast<uint4*>(a.x), static_cast<const uint4*>(a.y), vecs);
    CUDA_CHECK_LAST("residual_vec_kernel");
  } else {
    const int blocks =
        static_cast<int>(std::min<size_t>((a.count + threads - 1) / threads, 132 * 16));
    launch_kernel(pdl, residual_scalar_kernel, dim3(blocks), dim3(threads), 0, ctx.stream,
                  static_cast<bf16*>(a.x), static_cast<const bf16*>(a.y), a.count);
    CUDA_CHECK_LAST("residual_scalar_kernel");
  }
}

void residual_seed(const ResidualArgs& a, const LaunchCtx& ctx) {
  residual_impl(a, ctx, false);
}
void residual_pdl(const ResidualArgs& a, const LaunchCtx& ctx) {
  residual_impl(a, ctx, true);
}

}  // namespace

void residual_launch(const ResidualArgs& a, const LaunchCtx& ctx, bool pdl) { residual_impl(a, ctx, pdl); }

void register_residual_cuda(Registry& r) {
  r.add(make_entry<ResidualArgs, residual_seed, residual_cost<2>>(
      1, "seed", Backend::cuda, "grid-stride x += y in fp32, 16-byte vectors when aligned",
      kTestedOnly));
  r.add(make_entry<ResidualArgs, residual_pdl, residual_cost<2>>(
      2, "seed_pdl", Backend::cuda,
      "seed launched with programmatic dependent launch: its blocks are scheduled while the "
      "previous kernel finishes and wait (griddepcontrol.wait) before reading",
      kPreferred));
}

}  // namespace lantern::kernels
