// gpu_clocks on a GPU: NVML opens for the CUDA device, the clocks read sane
// values, and its cumulative counters only move forward while the GPU works.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "harness/gpu_clocks.h"
#include "tests/test_util.h"

cudaError_t lantern_test_busy_kernel(float* out, int n, int spins, cudaStream_t stream);

namespace lantern::harness {
namespace {

TEST(GpuClocksGpu, ReadsTheDeviceAndItsCountersMoveForward) {
  LANTERN_REQUIRE_GPU();
  std::string why;
  const std::unique_ptr<GpuClocks> c = GpuClocks::open(0, &why);
  ASSERT_NE(c, nullptr) << "a CUDA device but no NVML reading: " << why;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(c->name(), prop.name) << "NVML matched another device than CUDA's device 0";
  const GpuClockReading a = c->read();
  GpuClockSampler sampler(*c, 1.0);
  sampler.start();
  // About 0.3 s of work keeps the clocks up and moves the energy counter.
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), (1 << 20) * sizeof(float)), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) {
    ASSERT_EQ(lantern_test_busy_kernel(out, 1 << 20, 4000, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const GpuClockReading busy = c->read();
  GpuClockDelta d = clock_delta(a, busy);
  sampler.stop(d);
  cudaFree(out);
  EXPECT_GT(busy.sm_mhz, 0u);
  EXPECT_GT(busy.mem_mhz, 0u);
  EXPECT_GE(busy.sm_max_mhz, busy.sm_mhz) << "the SM clock above its reported maximum";
  EXPECT_GT(busy.host_s, a.host_s);
  if (a.has_energy) {
    EXPECT_GT(busy.energy_mj, a.energy_mj) << "0.3 s of kernels used no energy";
  }
  if (a.has_power_cap) {
    EXPECT_GE(busy.power_cap_ns, a.power_cap_ns);
  }
  if (a.has_thermal) {
    EXPECT_GE(busy.thermal_ns, a.thermal_ns);
  }
  EXPECT_GT(d.seconds, 0.29);
  // One sample a millisecond for 0.3 s (sleep_until may run late under load: at least a third).
  EXPECT_GT(d.sm_samples, 100);
  EXPECT_LE(d.sm_samples, 320);
  EXPECT_GT(d.sm_min_mhz, 0u);
  EXPECT_GE(d.sm_mean_mhz, d.sm_min_mhz);
  EXPECT_LE(d.sm_mean_mhz, busy.sm_max_mhz);
  EXPECT_LT(d.avg_power_w, 0) << "0.3 s is too short for the coarse energy counter: no average";
  std::printf("[gpu-clocks] %s: %s\n", c->name().c_str(), d.summary().c_str());
}

}  // namespace
}  // namespace lantern::harness
