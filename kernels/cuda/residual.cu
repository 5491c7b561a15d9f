// residual: x += y over bf16 activations (fp32 add, one rounding).
//
// Variant 1 (seed): grid-stride loop, 8 elements (16 bytes) per thread when the
// count and pointers allow it, scalar otherwise.
#include <algorithm>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

__global__ void residual_vec_kernel(uint4* __restrict__ x, const uint4* __restrict__ y,
                                    size_t vecs) {
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
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(y[i]));
}

void residual_seed(const ResidualArgs& a, const LaunchCtx& ctx) {
  if (a.count == 0) return;
  const int threads = 256;
  if (a.count % 8 == 0 && aligned(a.x, 16) && aligned(a.y, 16)) {
    const size_t vecs = a.count / 8;
    const int blocks = static_cast<int>(std::min<size_t>((vecs + threads - 1) / threads, 132 * 16));
    residual_vec_kernel<<<blocks, threads, 0, ctx.stream>>>(
        static_cast<uint4*>(a.x), static_cast<const uint4*>(a.y), vecs);
    CUDA_CHECK_LAST("residual_vec_kernel");
  } else {
    const int blocks =
        static_cast<int>(std::min<size_t>((a.count + threads - 1) / threads, 132 * 16));
    residual_scalar_kernel<<<blocks, threads, 0, ctx.stream>>>(
        static_cast<bf16*>(a.x), static_cast<const bf16*>(a.y), a.count);
    CUDA_CHECK_LAST("residual_scalar_kernel");
  }
}

}  // namespace

void register_residual_cuda(Registry& r) {
  r.add(make_entry<ResidualArgs, residual_seed, residual_cost<2>>(
      1, "seed", Backend::cuda, "grid-stride x += y in fp32, 16-byte vectors when aligned",
      kPreferred));
}

}  // namespace lantern::kernels
