// CUDA weight loads: one device allocation holding the same bytes as the CPU
// load, through the pipelined pinned-buffer path.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/synth.h"
#include "engine/weights.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;

void expect_same_bytes(const Weights& gpu, const Weights& cpu) {
  ASSERT_EQ(gpu.backend(), kernels::Backend::cuda);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, gpu.block()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  ASSERT_EQ(gpu.bytes(), cpu.bytes());
  ASSERT_EQ(gpu.views().size(), cpu.views().size());
  std::vector<char> host(gpu.bytes());
  ASSERT_EQ(cudaMemcpy(host.data(), gpu.block(), gpu.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  // Whole block (tensors and zeroed alignment gaps), then view by view for a
  // readable failure.
  if (std::memcmp(host.data(), cpu.block(), cpu.bytes()) != 0) {
    for (const auto& v : cpu.views())
      EXPECT_EQ(std::memcmp(host.data() + v.offset,
                            static_cast<const char*>(cpu.block()) + v.offset, v.bytes),
                0)
          << v.name;
    ADD_FAILURE() << "device block differs from the CPU block";
  }
  // Named pointers sit at the same offsets in both blocks.
  auto off = [](const Weights& w, const void* p) {
    return static_cast<const char*>(p) - static_cast<const char*>(w.block());
  };
  EXPECT_EQ(off(gpu, gpu.embed), off(cpu, cpu.embed));
  EXPECT_EQ(off(gpu, gpu.lm_head), off(cpu, cpu.lm_head));
  EXPECT_EQ(off(gpu, gpu.final_norm), off(cpu, cpu.final_norm));
  for (size_t l = 0; l < cpu.layers.size(); ++l) {
    EXPECT_EQ(off(gpu, gpu.layers[l].wq), off(cpu, cpu.layers[l].wq));
    EXPECT_EQ(off(gpu, gpu.layers[l].w_down), off(cpu, cpu.layers[l].w_down));
  }
}

TEST(WeightsGpu, TinyMatchesCpuLoad) {
  LANTERN_REQUIRE_GPU();
  auto dir = test::scratch_dir("weights_gpu_tiny");
  const ModelConfig cfg = synth_preset("tiny");
  SynthOptions opts;
  opts.seed = test::test_seed();
  opts.with_tokenizer = false;
  write_synthetic_model(cfg, dir, opts);
  Weights cpu = Weights::load(cfg, dir, kernels::Backend::cpu);
  Weights gpu = Weights::load(cfg, dir, kernels::Backend::cuda);
  expect_same_bytes(gpu, cpu);
  EXPECT_EQ(gpu.stats().bytes, cpu.stats().bytes);
}

TEST(WeightsGpu, ManyChunksReuseStagingBuffers) {
  LANTERN_REQUIRE_GPU();
  // 128256 x 1024 bf16 embedding + lm_head = 501 MiB: 8 chunks through 3
  // staging buffers, tensors crossing chunk boundaries.
  auto dir = test::scratch_dir("weights_gpu_chunks");
  ModelConfig cfg = synth_preset("tiny");
  cfg.hidden_size = 1024;
  cfg.num_q_heads = 8;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 128;
  cfg.intermediate_size = 2048;
  cfg.tie_word_embeddings = false;
  SynthOptions opts;
  opts.with_tokenizer = false;
  write_synthetic_model(cfg, dir, opts);
  Weights cpu = Weights::load(cfg, dir, kernels::Backend::cpu);
  size_t calls = 0;
  Weights gpu = Weights::load(cfg, dir, kernels::Backend::cuda, [&](size_t, size_t) { ++calls; });
  EXPECT_GE(calls, 8u);
  expect_same_bytes(gpu, cpu);
  fs::remove_all(dir);
}

// Load time of the 1B model to the GPU (the goal: <= 1.0 s from a warm
// page cache). Not a pass/fail test: run it with
//   LANTERN_LOAD_MODEL=/path/to/llama-3.2-1b lantern_gpu_tests
//     --gtest_also_run_disabled_tests --gtest_filter='*LoadTime*'
TEST(WeightsGpu, DISABLED_LoadTime) {
  LANTERN_REQUIRE_GPU();
  const char* env = std::getenv("LANTERN_LOAD_MODEL");
  if (!env) GTEST_SKIP() << "set LANTERN_LOAD_MODEL to a model directory";
  const ModelConfig cfg = ModelConfig::load(env);
  for (int run = 0; run < 3; ++run) {  // the first run warms the page cache
    Weights w = Weights::load(cfg, env, kernels::Backend::cuda, [](size_t, size_t) {});
    std::printf("load %d: %.3f GB in %.3f s (%.2f GB/s; reading %.3f s)\n", run,
                w.stats().bytes / 1e9, w.stats().total_seconds, w.stats().gb_per_s(),
                w.stats().read_seconds);
  }
}

}  // namespace
}  // namespace lantern
