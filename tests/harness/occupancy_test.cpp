// Theoretical occupancy (runfmt/occupancy.h): hand-computed cases on the
// H100/H200 SM (sm_90: 65536 regs, 228 KiB shared memory with 1 KiB reserved
// per block, 2048 threads, 32 blocks, 132 SMs), then random launches against
// the CUDA toolkit's own calculator (cuda_occupancy.h, header-only, no GPU).
#include "harness/runfmt/occupancy.h"

#include <random>

#include <gtest/gtest.h>

#if __has_include(<cuda_occupancy.h>)
#include <cuda_occupancy.h>
#define LANTERN_HAVE_CUDA_OCCUPANCY 1
#endif

namespace lantern::runfmt {
namespace {

LaunchConfig launch(int64_t grid, int block, int regs, int static_smem = 0, int dynamic_smem = 0) {
  LaunchConfig c;
  c.grid_x = static_cast<int32_t>(grid);
  c.grid_y = c.grid_z = 1;
  c.block_x = block;
  c.block_y = c.block_z = 1;
  c.regs_per_thread = static_cast<uint16_t>(regs);
  c.static_smem = static_smem;
  c.dynamic_smem = dynamic_smem;
  return c;
}

constexpr int64_t kManyBlocks = 100000;  // many waves: the grid never limits

TEST(Occupancy, RegistersLimitA256ThreadBlockAt64Regs) {
  // 64 regs x 32 lanes = 2048 regs per warp; 16384 regs per sub-partition
  // hold 8 warps, 32 per SM; 8 warps per block -> 4 blocks = 32 of 64 warps.
  const SmLimits sm = sm90_limits();
  const BlockLimits b = block_limits(launch(kManyBlocks, 256, 64), sm);
  EXPECT_EQ(b.regs, 4);
  EXPECT_EQ(b.threads, 8);
  EXPECT_EQ(b.smem, 228);  // 1 KiB reserved per block
  EXPECT_EQ(b.blocks, 32);
  auto o = occupancy(launch(kManyBlocks, 256, 64), sm);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 4);
  EXPECT_DOUBLE_EQ(o->occupancy, 0.5);
  EXPECT_EQ(o->limit, "regs");
  EXPECT_DOUBLE_EQ(o->waves, kManyBlocks / (4.0 * 132));
}

TEST(Occupancy, RegistersAreAllocatedIn256RegisterUnitsPerWarp) {
  // 37 regs: 1184 per warp, allocated as 1280: 12 warps per sub-partition,
  // 48 per SM, 4 warps per block -> 12 blocks (13 without the rounding).
  auto o = occupancy(launch(kManyBlocks, 128, 37), sm90_limits());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 12);
  EXPECT_DOUBLE_EQ(o->occupancy, 48.0 / 64);
  EXPECT_EQ(o->limit, "regs");
}

TEST(Occupancy, RegistersAreSplitOverFourSubPartitions) {
  // 96 regs: 3072 per warp; 16384 / 3072 = 5 warps per sub-partition, 20 per
  // SM (65536 / 3072 would give 21 if the SM's registers were one pool).
  auto o = occupancy(launch(kManyBlocks, 32, 96), sm90_limits());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 20);
  EXPECT_DOUBLE_EQ(o->occupancy, 20.0 / 64);
  EXPECT_EQ(o->limit, "regs");
}

TEST(Occupancy, SharedMemoryLimitsWithReserveAndGranularity) {
  // 48 KiB dynamic + 1 KiB reserved = 50176 bytes: 233472 / 50176 -> 4 blocks.
  auto o = occupancy(launch(kManyBlocks, 128, 32, 0, 48 * 1024), sm90_limits());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 4);
  EXPECT_DOUBLE_EQ(o->occupancy, 16.0 / 64);
  EXPECT_EQ(o->limit, "smem");
  // 10626 + 1024 = 11650 bytes round up to 11776 (128-byte units):
  // 19 blocks (20 without the rounding); static and dynamic add up.
  const BlockLimits b = block_limits(launch(kManyBlocks, 32, 16, 626, 10000), sm90_limits());
  EXPECT_EQ(b.smem, 19);
  o = occupancy(launch(kManyBlocks, 32, 16, 626, 10000), sm90_limits());
  EXPECT_EQ(o->limit, "smem");
  EXPECT_DOUBLE_EQ(o->occupancy, 19.0 / 64);
}

TEST(Occupancy, ThreadsAndBlockSlotsLimitAndTiesNameBoth) {
  auto o = occupancy(launch(kManyBlocks, 1024, 16), sm90_limits());  // 2 x 32 warps
  EXPECT_EQ(o->blocks_per_sm, 2);
  EXPECT_EQ(o->limit, "threads");
  EXPECT_DOUBLE_EQ(o->occupancy, 1.0);
  // 32 regs x 1024 threads: registers allow exactly 2 blocks as well.
  o = occupancy(launch(kManyBlocks, 1024, 32), sm90_limits());
  EXPECT_EQ(o->limit, "regs+threads");
  // One-warp blocks: 32 block slots per SM hold 32 of 64 warps.
  o = occupancy(launch(kManyBlocks, 32, 16), sm90_limits());
  EXPECT_EQ(o->blocks_per_sm, 32);
  EXPECT_EQ(o->limit, "blocks");
  EXPECT_DOUBLE_EQ(o->occupancy, 0.5);
  // A partial warp takes a whole warp slot: 48 threads = 2 warps.
  o = occupancy(launch(kManyBlocks, 48, 16), sm90_limits());
  EXPECT_EQ(o->limit, "threads+blocks");
  EXPECT_DOUBLE_EQ(o->occupancy, 1.0);
}

TEST(Occupancy, AGridSmallerThanOneWaveIsTheLimit) {
  // 4 blocks per SM x 132 SMs = 528 blocks per wave.
  auto o = occupancy(launch(66, 256, 64), sm90_limits());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 4);
  EXPECT_EQ(o->limit, "grid");
  EXPECT_DOUBLE_EQ(o->waves, 66.0 / 528);
  EXPECT_DOUBLE_EQ(o->occupancy, 66.0 / 132 * 8 / 64);  // half the SMs hold one 8-warp block
  o = occupancy(launch(528, 256, 64), sm90_limits());
  EXPECT_EQ(o->limit, "regs");
  EXPECT_DOUBLE_EQ(o->waves, 1.0);
  // Grid and block dimensions multiply: 4x4x2 blocks of 8x8x4 threads.
  LaunchConfig c = launch(4, 8, 64);
  c.grid_y = 4;
  c.grid_z = 2;
  c.block_y = 8;
  c.block_z = 4;
  o = occupancy(c, sm90_limits());
  EXPECT_EQ(o->blocks_per_sm, 4);
  EXPECT_DOUBLE_EQ(o->waves, 32.0 / 528);
}

TEST(Occupancy, ABlockThatCannotRunHasZeroOccupancy) {
  // 255 regs x 1024 threads: 8192 regs per warp x 32 warps > 65536 per block.
  auto o = occupancy(launch(kManyBlocks, 1024, 255), sm90_limits());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocks_per_sm, 0);
  EXPECT_EQ(o->occupancy, 0);
  EXPECT_EQ(o->limit, "regs");
}

TEST(Occupancy, UnknownLaunchOrDeviceGivesNone) {
  EXPECT_FALSE(occupancy(LaunchConfig{}, sm90_limits()));
  EXPECT_FALSE(occupancy(launch(1, 128, 32), SmLimits{}));
}

TEST(Occupancy, SmLimitsRoundTripThroughJson) {
  SmLimits sm = sm90_limits(132);
  nlohmann::json j = to_json(sm);
  EXPECT_EQ(j["compute_capability"], "9.0");
  EXPECT_EQ(j["regs_per_sm"], 65536);
  EXPECT_EQ(sm_limits_from_json(j), sm);
  j.erase("smem_per_sm");
  EXPECT_FALSE(sm_limits_from_json(j));
}

TEST(Occupancy, DimsTextDropsTrailingOnes) {
  EXPECT_EQ(dims_text(64, 1, 1), "64");
  EXPECT_EQ(dims_text(64, 8, 1), "64x8");
  EXPECT_EQ(dims_text(16, 1, 2), "16x1x2");
}

#ifdef LANTERN_HAVE_CUDA_OCCUPANCY
// Blocks per SM and the limiting resources agree with the toolkit's
// calculator on random launches (fresh seed each run, printed on failure).
TEST(Occupancy, AgreesWithTheCudaOccupancyCalculator) {
  const SmLimits sm = sm90_limits();
  cudaOccDeviceProp prop;
  prop.computeMajor = 9;
  prop.computeMinor = 0;
  prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsPerMultiprocessor = 2048;
  prop.regsPerBlock = 65536;
  prop.regsPerMultiprocessor = 65536;
  prop.warpSize = 32;
  prop.sharedMemPerBlock = 48 * 1024;
  prop.sharedMemPerMultiprocessor = 228 * 1024;
  prop.numSms = 132;
  prop.sharedMemPerBlockOptin = 227 * 1024;
  prop.reservedSharedMemPerBlock = 1024;
  cudaOccDeviceState state;
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 5000; ++i) {
    const int block = uniform(0, 1) ? 32 * uniform(1, 32) : uniform(1, 1024);
    const int regs = uniform(1, 255);
    const int static_smem = uniform(0, 3) ? 0 : uniform(0, 48 * 1024);
    const int dynamic_smem = uniform(0, 1) ? 0 : uniform(0, 227 * 1024 - static_smem);
    cudaOccFuncAttributes attr;
    attr.maxThreadsPerBlock = 1024;
    attr.numRegs = regs;
    attr.sharedSizeBytes = static_cast<size_t>(static_smem);
    attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    attr.maxDynamicSharedSizeBytes = static_cast<size_t>(dynamic_smem);
    attr.numBlockBarriers = 1;
    cudaOccResult ref;
    ASSERT_EQ(cudaOccMaxActiveBlocksPerMultiprocessor(&ref, &prop, &attr, &state, block,
                                                      static_cast<size_t>(dynamic_smem)),
              CUDA_OCC_SUCCESS);
    auto o = occupancy(launch(kManyBlocks, block, regs, static_smem, dynamic_smem), sm);
    ASSERT_TRUE(o);
    const std::string where = "seed " + std::to_string(seed) + ": block " + std::to_string(block) +
                              ", regs " + std::to_string(regs) + ", smem " +
                              std::to_string(static_smem) + "+" + std::to_string(dynamic_smem);
    ASSERT_EQ(o->blocks_per_sm, ref.activeBlocksPerMultiprocessor) << where;
    if (ref.activeBlocksPerMultiprocessor == 0) continue;
    auto named = [&](const char* name) { return o->limit.find(name) != std::string::npos; };
    EXPECT_EQ(named("regs"), (ref.limitingFactors & OCC_LIMIT_REGISTERS) != 0) << where << " " << o->limit;
    EXPECT_EQ(named("smem"), (ref.limitingFactors & OCC_LIMIT_SHARED_MEMORY) != 0) << where << " " << o->limit;
    EXPECT_EQ(named("threads"), (ref.limitingFactors & OCC_LIMIT_WARPS) != 0) << where << " " << o->limit;
    EXPECT_EQ(named("blocks"), (ref.limitingFactors & OCC_LIMIT_BLOCKS) != 0) << where << " " << o->limit;
  }
}
#else
TEST(Occupancy, AgreesWithTheCudaOccupancyCalculator) {
  GTEST_SKIP() << "cuda_occupancy.h (CUDA toolkit) is not on this target's include path";
}
#endif

}  // namespace
}  // namespace lantern::runfmt
