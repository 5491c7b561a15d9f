// A small kernel for the harness's GPU tests (CUPTI needs real launches to
// attribute), and its own check.
#include <cuda_runtime_api.h>

#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace {

__global__ void busy_kernel(float* out, int n, int spins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = static_cast<float>(i);
  for (int s = 0; s < spins; ++s) x = x * 0.999f + 1.0f;
  out[i] = x;
}

}  // namespace

// out[i] = the fixed point iteration x <- 0.999 x + 1 started at i, `spins` times.
cudaError_t lantern_test_busy_kernel(float* out, int n, int spins, cudaStream_t stream) {
  busy_kernel<<<(n + 127) / 128, 128, 0, stream>>>(out, n, spins);
  return cudaGetLastError();
}

// What the runtime says about the busy kernel at `block` threads: resident
// blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor) and registers
// per thread (cudaFuncGetAttributes), to check CUPTI's records against.
cudaError_t lantern_test_busy_kernel_occupancy(int block, int* blocks_per_sm, int* regs_per_thread) {
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, busy_kernel, block, 0);
  if (err != cudaSuccess) return err;
  cudaFuncAttributes attr{};
  err = cudaFuncGetAttributes(&attr, busy_kernel);
  *regs_per_thread = attr.numRegs;
  return err;
}

TEST(BusyKernel, ComputesItsRecurrence) {
  LANTERN_REQUIRE_GPU();
  const int n = 1000, spins = 50;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(lantern_test_busy_kernel(d, n, spins, nullptr), cudaSuccess);
  std::vector<float> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  for (int i = 0; i < n; i += 97) {
    float x = static_cast<float>(i);
    for (int s = 0; s < spins; ++s) x = x * 0.999f + 1.0f;
    EXPECT_NEAR(h[i], x, 1e-3f * (1 + std::abs(x))) << i;
  }
}
