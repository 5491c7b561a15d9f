// Built only into lantern_scheduler_tests, whose include path has no CUDA:
// the scheduler and the KV block manager (and the engine headers they pull
// in: engine.h, config.h, weights.h, observer.h, kernels/registry.h) must
// compile without CUDA headers, as docs/architecture.md promises.
#include "engine/kv_cache.h"
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#if __has_include(<cuda_runtime_api.h>)
#error "lantern_scheduler_tests must be built without the CUDA include path"
#endif
#if defined(CUDART_VERSION) || defined(CUBLAS_VER_MAJOR) || defined(__CUDA_RUNTIME_H__)
#error "a CUDA header reached the scheduler or the KV block manager"
#endif

namespace lantern {
namespace {

TEST(CpuOnly, RegistryHandlesAreTheCudaTypesByName) {
  // Forward-declared in kernels/registry.h; null is all the CPU side needs.
  kernels::LaunchCtx ctx;
  EXPECT_EQ(ctx.stream, nullptr);
  EXPECT_EQ(ctx.cublas, nullptr);
  EXPECT_EQ(ctx.backend, kernels::Backend::cpu);
}

TEST(CpuOnly, KvBlocksGrowAndComeBackWithoutCuda) {
  KvBlockManager kv(/*num_blocks=*/12, /*block_size=*/4, /*num_layers=*/2, /*max_seqs=*/2,
                    /*max_blocks_per_seq=*/3);
  kv.grow(0, 1, 9, 0);  // 3 blocks in each of 2 layers
  EXPECT_EQ(kv.blocks_of(0), 6);
  EXPECT_EQ(kv.free_blocks(), 6);
  EXPECT_EQ(kv.take_table_updates().size(), 6u);
  EXPECT_TRUE(kv.can_grow(1, 12));   // 3 blocks x 2 layers = the 6 left
  EXPECT_FALSE(kv.can_grow(1, 13));  // 4 x 2 = 8 > 6
  kv.release(0, 1, 1);
  EXPECT_EQ(kv.free_blocks(), 12);
}

}  // namespace
}  // namespace lantern
