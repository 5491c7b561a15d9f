// Memory map: allocations with owners and lifetimes, the arena's views, and
// the errors it must not swallow.
#include "harness/memory_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/harness/seed_plan.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;

uint64_t g_ns = 0;
uint64_t fake_clock() { return g_ns += 2000; }

AllocEvent ev(const char* owner, const char* name, uint64_t addr, uint64_t bytes,
              kernels::Backend b = kernels::Backend::cuda, bool is_free = false) {
  return AllocEvent{owner, name, addr, bytes, b, is_free};
}

TEST(MemoryRecorder, RecordsAllocationsArenaAndPeak) {
  g_ns = 0;
  MemoryRecorder m(fake_clock);
  m.on_alloc(ev("weights", "weight block", 0x10000, 0x8000));
  m.on_alloc(ev("arena", "activation arena", 0x20000, 0x1000));
  m.on_alloc(ev("kv_pool", "KV blocks", 0x40000, 0x10000));
  m.on_alloc(ev("sampling", "pinned", 0x7000, 64, kernels::Backend::cpu));
  EXPECT_EQ(m.live_device_bytes(), 0x8000u + 0x1000 + 0x10000);
  m.on_alloc(ev("kv_pool", "KV blocks", 0x40000, 0, kernels::Backend::cuda, true));
  m.on_alloc(ev("cublas_workspace", "cuBLAS workspace", 0x40000, 0x100));  // reuses the address

  auto a = testing::make_seed_arena();
  m.on_arena(a->arena);

  runfmt::MemoryMap map;
  m.fill(map, 0);
  EXPECT_TRUE(map.errors.empty()) << map.errors[0];
  ASSERT_EQ(map.allocations.size(), 5u);
  EXPECT_EQ(map.allocations[0].owner, "weights");
  EXPECT_EQ(map.allocations[0].address, 0x10000u);
  EXPECT_EQ(map.allocations[0].backend, "cuda");
  EXPECT_DOUBLE_EQ(map.allocations[0].alloc_us, 2.0);
  EXPECT_FALSE(map.allocations[0].free_us.has_value());
  EXPECT_EQ(map.allocations[3].backend, "cpu");
  ASSERT_TRUE(map.allocations[2].free_us.has_value());
  EXPECT_DOUBLE_EQ(*map.allocations[2].free_us, 10.0);
  EXPECT_EQ(map.peak_device_bytes, 0x8000u + 0x1000 + 0x10000);
  EXPECT_EQ(map.views.size(), a->arena.views().size());
  EXPECT_EQ(map.buffers.size(), a->arena.buffers().size());
  EXPECT_EQ(map.views[a->attn_out].name, "attn_out");
  EXPECT_EQ(map.views[a->attn_out].buffer, map.views[a->q].buffer) << "the seed alias";
  EXPECT_EQ(map.arena_bytes, a->arena.total_bytes());
  // One counter sample per event, device and host bytes separately.
  ASSERT_EQ(m.samples().size(), 6u);
  EXPECT_EQ(m.samples()[3].host_bytes, 64u);
  EXPECT_EQ(m.samples()[4].device_bytes, 0x8000u + 0x1000);
}

TEST(MemoryRecorder, OverlapsAndUnknownFreesAreErrors) {
  MemoryRecorder m(fake_clock);
  m.on_alloc(ev("weights", "weight block", 0x1000, 0x1000));
  m.on_alloc(ev("arena", "activation arena", 0x1800, 0x1000));  // overlaps the weights
  m.on_alloc(ev("kv_pool", "KV blocks", 0x9000, 0, kernels::Backend::cuda, true));
  m.on_alloc(ev("host", "same address, other backend", 0x1000, 0x1000, kernels::Backend::cpu));
  runfmt::MemoryMap map;
  m.fill(map, 0);
  ASSERT_EQ(map.errors.size(), 2u);
  EXPECT_THAT(map.errors[0], HasSubstr("arena activation arena"));
  EXPECT_THAT(map.errors[0], HasSubstr("overlaps live weights weight block"));
  EXPECT_THAT(map.errors[1], HasSubstr("free of kv_pool KV blocks (cuda) at 0x9000"));
}

}  // namespace
}  // namespace lantern::harness
