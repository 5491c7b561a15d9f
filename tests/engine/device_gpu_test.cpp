// Device on CUDA: the GPU it was asked for (--gpu N), stream and cuBLAS handle
// on it, tracked device allocations, copies through the stream; the same
// bytes as the CPU backend's operations.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/engine.h"
#include "engine/synth.h"
#include "kernels/base/errors.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

struct AllocLog : Observer {
  std::vector<AllocEvent> events;
  void on_alloc(const AllocEvent& e) override { events.push_back(e); }
};

TEST(DeviceGpu, EveryVisibleGpuCanBeSelected) {
  LANTERN_REQUIRE_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  for (int g = count - 1; g >= 0; --g) {
    Device d(kernels::Backend::cuda, nullptr, g);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, g);
    EXPECT_EQ(d.gpu().device, g);
    EXPECT_FALSE(d.gpu().name.empty());
    EXPECT_EQ(d.gpu().uuid.rfind("GPU-", 0), 0u);
    EXPECT_GT(d.gpu().sm_count, 0);
    EXPECT_NE(d.stream(), nullptr);
    EXPECT_NE(d.cublas(), nullptr);
    EXPECT_GT(d.free_memory(), 0u);
  }
  EXPECT_THROW(Device(kernels::Backend::cuda, nullptr, count), Error);
}

TEST(DeviceGpu, AllocCopyMemsetRoundTrip) {
  LANTERN_REQUIRE_GPU();
  AllocLog log;
  Device d(kernels::Backend::cuda, &log, 0);
  const std::vector<float> src = test::random_floats(4099, -3.f, 3.f);
  const size_t bytes = src.size() * sizeof(float);
  void* dev = d.alloc(bytes, "arena", "x");
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, dev), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  float* pinned = static_cast<float*>(d.alloc_pinned(bytes));
  d.copy_h2d(dev, src.data(), bytes);
  d.memset(static_cast<char*>(dev) + 8, 0, 8);
  d.copy_d2h(pinned, dev, bytes);
  d.synchronize();
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(pinned[i], (i == 2 || i == 3) ? 0.0f : src[i]) << i;
  d.free_pinned(pinned);
  d.free(dev, "arena", "x");
#if LANTERN_INSTRUMENTATION
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].backend, kernels::Backend::cuda);
  EXPECT_EQ(log.events[0].bytes, bytes);
  EXPECT_TRUE(log.events[1].is_free);
#endif
}

TEST(DeviceGpu, AnAllocationTooLargeSaysWhatToLower) {
  LANTERN_REQUIRE_GPU();
  Device d(kernels::Backend::cuda);
  try {
    d.alloc(size_t{1} << 50, "kv_pool", "KV blocks");  // 1 PiB
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("failed: cudaErrorMemoryAllocation (out of memory) at "), std::string::npos) << m;
    EXPECT_NE(m.find("kv_pool/KV blocks: lower the limits"), std::string::npos) << m;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed call's error was cleared";
}

TEST(DeviceGpu, EngineRecordsItsGpuAndRefusesWeightsFromAnother) {
  LANTERN_REQUIRE_GPU();
  auto dir = test::scratch_dir("device_gpu_engine");
  const ModelConfig cfg = synth_preset("tiny");
  SynthOptions so;
  so.seed = test::test_seed();
  so.with_tokenizer = false;
  write_synthetic_model(cfg, dir, so);
  EngineOptions opt;
  opt.backend = kernels::Backend::cuda;
  opt.limits.max_seqs = 2;
  opt.limits.max_context = 128;
  opt.limits.max_batch_tokens = 64;
  opt.limits.kv_num_blocks = 64;
  {
    Engine e(cfg, Weights::load(cfg, dir, kernels::Backend::cuda, {}, 0), opt);
    EXPECT_EQ(e.describe().at("gpu"), 0);
  }
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "one GPU: the cross-GPU refusal needs two";
  opt.gpu = 1;
  EXPECT_THROW(Engine(cfg, Weights::load(cfg, dir, kernels::Backend::cuda, {}, 0), opt), Error);
  Engine e1(cfg, Weights::load(cfg, dir, kernels::Backend::cuda, {}, 1), opt);
  EXPECT_EQ(e1.describe().at("gpu"), 1);
}

}  // namespace
}  // namespace lantern
