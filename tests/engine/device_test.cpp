// Device on the CPU backend: the same calls as on CUDA, as host memory
// operations, with every allocation and free told to the observer. And the
// --gpu checks that need no GPU (device_gpu_test.cpp has the CUDA side).
#include "engine/device.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

struct AllocLog : Observer {
  std::vector<AllocEvent> events;
  void on_alloc(const AllocEvent& e) override { events.push_back(e); }
};

TEST(DeviceCpu, AllocationsAreAlignedAndToldToTheObserver) {
  AllocLog log;
  Device d(kernels::Backend::cpu, &log, /*gpu=*/3);  // the index means nothing on the CPU
  EXPECT_FALSE(d.is_cuda());
  EXPECT_EQ(d.stream(), nullptr);
  EXPECT_EQ(d.cublas(), nullptr);
  EXPECT_EQ(d.free_memory(), 0u);
  void* p = d.alloc(1000, "kv_pool", "KV blocks");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  std::memset(p, 1, 1000);
  d.free(p, "kv_pool", "KV blocks");
  d.free(nullptr, "kv_pool", "nothing");  // ignored, not reported
#if LANTERN_INSTRUMENTATION
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].owner, "kv_pool");
  EXPECT_EQ(log.events[0].name, "KV blocks");
  EXPECT_EQ(log.events[0].bytes, 1000u);
  EXPECT_EQ(log.events[0].address, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(log.events[0].backend, kernels::Backend::cpu);
  EXPECT_FALSE(log.events[0].is_free);
  EXPECT_TRUE(log.events[1].is_free);
  EXPECT_EQ(log.events[1].address, reinterpret_cast<uint64_t>(p));
#endif
}

TEST(DeviceCpu, CopiesAndMemsetMoveTheBytes) {
  Device d(kernels::Backend::cpu);
  const std::vector<float> src = test::random_floats(777, -5.f, 5.f);
  const size_t bytes = src.size() * sizeof(float);
  void* dev = d.alloc(bytes, "arena", "x");
  float* pinned = static_cast<float*>(d.alloc_pinned(bytes));
  d.copy_h2d(dev, src.data(), bytes);
  d.copy_d2h(pinned, dev, bytes);
  d.synchronize();
  EXPECT_EQ(std::memcmp(pinned, src.data(), bytes), 0);
  d.memset(dev, 0xff, 16);
  d.copy_d2h(pinned, dev, bytes);
  for (int i = 0; i < 4; ++i) {
    uint32_t u;
    std::memcpy(&u, &pinned[i], 4);
    EXPECT_EQ(u, 0xffffffffu);
  }
  EXPECT_EQ(pinned[4], src[4]);
  d.copy_h2d(dev, nullptr, 0);  // zero bytes: nothing read
  d.free_pinned(pinned);
  d.free(dev, "arena", "x");
}

TEST(DeviceCpu, LaunchContextCarriesBackendAndWorkspace) {
  Device d(kernels::Backend::cpu);
  char ws[64];
  kernels::LaunchCtx c = d.ctx(ws, sizeof ws);
  EXPECT_EQ(c.backend, kernels::Backend::cpu);
  EXPECT_EQ(c.workspace, ws);
  EXPECT_EQ(c.workspace_bytes, 64u);
  EXPECT_EQ(c.stream, nullptr);
}

TEST(Device, CudaAvailableAgreesWithTheTestHelperAndSaysWhyNot) {
  std::string reason, test_reason;
  const bool available = Device::cuda_available(&reason);
  EXPECT_EQ(available, test::gpu_available(&test_reason));
  if (!available) {
    EXPECT_FALSE(reason.empty());
  }
}

TEST(Device, SelectGpuRefusesAnIndexNoGpuHas) {
  for (int index : {-1, 4096}) {
    try {
      Device::select_gpu(index);
      FAIL() << "--gpu " << index << " accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      if (Device::cuda_available()) {
        EXPECT_EQ(m.rfind("--gpu " + std::to_string(index) + ": no such GPU (", 0), 0u) << m;
      } else {
        EXPECT_NE(m.find("no usable CUDA GPU"), std::string::npos) << m;
      }
    }
  }
}

}  // namespace
}  // namespace lantern
