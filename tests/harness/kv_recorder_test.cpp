// KV recorder: occupancy stats from synthetic event streams, its own ledger
// checks, and agreement with the engine's block manager.
#include "harness/kv_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/kv_cache.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;

uint64_t g_fake_ns = 0;
uint64_t fake_clock() { return g_fake_ns += 1000; }

KvEvent alloc(int64_t step, int block, int64_t seq, int layer) {
  return KvEvent{KvEvent::alloc, step, block, seq, layer};
}
KvEvent release(int64_t step, int block, int64_t seq, int layer) {
  return KvEvent{KvEvent::free, step, block, seq, layer};
}

StepInfo step(int64_t s) {
  StepInfo i;
  i.step = s;
  i.phase = "decode";
  return i;
}

TEST(KvRecorder, StatsFromASyntheticStream) {
  KvRecorder r(fake_clock);
  r.set_block_size(16);
  r.set_total_blocks(10);
  // Step 0: seq 1 takes 2 blocks per layer (2 layers), seq 2 one per layer.
  for (int layer = 0; layer < 2; ++layer) {
    r.on_kv_event(alloc(0, 0 + 3 * layer, 1, layer));
    r.on_kv_event(alloc(0, 1 + 3 * layer, 1, layer));
    r.on_kv_event(alloc(0, 2 + 3 * layer, 2, layer));
  }
  KvStepStats s0;
  s0.step = 0;
  s0.total_blocks = 10;
  s0.used_blocks = 6;
  s0.free_blocks = 4;
  s0.num_seqs = 2;
  s0.used_token_slots = 2 * (20 + 5);          // seq 1: 20 tokens, seq 2: 5 tokens, 2 layers
  s0.wasted_token_slots = 2 * ((32 - 20) + (16 - 5));
  r.on_kv_step(s0);
  r.on_step_end(step(0));
  // Step 1: seq 2 finishes.
  r.on_kv_event(release(1, 2, 2, 0));
  r.on_kv_event(release(1, 5, 2, 1));
  r.on_step_end(step(1));

  runfmt::KvData d = r.data(0);
  ASSERT_EQ(d.steps.size(), 2u);
  const runfmt::KvStepRecord& a = d.steps[0];
  EXPECT_EQ(a.used_blocks, 6);
  EXPECT_EQ(a.free_blocks, 4);
  EXPECT_EQ(a.total_blocks, 10);
  EXPECT_EQ(a.num_seqs, 2);
  EXPECT_EQ(a.blocks_per_seq, (std::vector<std::pair<int64_t, int>>{{1, 4}, {2, 2}}));
  EXPECT_EQ(a.wasted_token_slots, 46);
  EXPECT_DOUBLE_EQ(a.fragmentation, 46.0 / (50.0 + 46.0));
  const runfmt::KvStepRecord& b = d.steps[1];
  EXPECT_EQ(b.used_blocks, 4);
  EXPECT_EQ(b.free_blocks, 6);
  EXPECT_EQ(b.blocks_per_seq, (std::vector<std::pair<int64_t, int>>{{1, 4}}));
  EXPECT_EQ(b.wasted_token_slots, -1) << "no engine stats for step 1";
  EXPECT_EQ(d.peak_used_blocks, 6);
  EXPECT_EQ(d.peak_step, 0);
  EXPECT_EQ(d.events.size(), 8u);
  EXPECT_EQ(d.events[6].kind, 1);
  EXPECT_EQ(d.events[6].block, 2);
  EXPECT_EQ(d.leaked_blocks, (std::vector<int>{0, 1, 3, 4}));
  ASSERT_EQ(d.errors.size(), 1u);
  EXPECT_THAT(d.errors[0], HasSubstr("4 blocks were still held"));
  EXPECT_GT(a.t_us, 0);
  EXPECT_GT(b.t_us, a.t_us);
}

TEST(KvRecorder, LedgerErrorsAreReported) {
  KvRecorder r(fake_clock);
  r.set_total_blocks(4);
  r.on_kv_event(alloc(0, 1, 7, 0));
  r.on_kv_event(alloc(0, 1, 8, 0));    // block 1 is held by seq 7
  r.on_kv_event(release(1, 3, 7, 0));  // nobody holds block 3
  r.on_kv_event(release(1, 1, 8, 0));  // held by seq 7, not 8
  KvStepStats s;
  s.step = 1;
  s.total_blocks = 4;
  s.used_blocks = 2;  // the events leave 0 held
  s.free_blocks = 2;
  r.on_kv_step(s);
  runfmt::KvData d = r.data(0);
  ASSERT_EQ(d.errors.size(), 5u);
  EXPECT_THAT(d.errors[0], HasSubstr("block 1 allocated to sequence 8"));
  EXPECT_THAT(d.errors[1], HasSubstr("frees block 3, which nobody holds"));
  EXPECT_THAT(d.errors[2], HasSubstr("sequence 8 layer 0 frees block 1 held by sequence 7"));
  EXPECT_THAT(d.errors[3], HasSubstr("engine reports 2 used blocks"));
  EXPECT_THAT(d.errors[4], HasSubstr("engine reports 2 free blocks"));
  EXPECT_TRUE(d.leaked_blocks.empty());
}

TEST(KvRecorder, AgreesWithTheEngineBlockManager) {
  KvRecorder r(fake_clock);
  r.set_block_size(4);
  const int layers = 3, slots = 4, max_blocks = 8;
  KvBlockManager kv(40, 4, layers, slots, max_blocks, &r);
  kv.grow(0, 100, 5, 0);   // 2 blocks per layer
  kv.grow(1, 101, 13, 0);  // 4 blocks per layer
  r.on_kv_step(kv.stats(0));
  r.on_step_end(step(0));
  kv.grow(0, 100, 9, 1);   // 3 blocks per layer
  kv.release(1, 101, 1);
  r.on_kv_step(kv.stats(1));
  r.on_step_end(step(1));
  kv.release(0, 100, 2);
  r.on_kv_step(kv.stats(2));
  r.on_step_end(step(2));

  runfmt::KvData d = r.data(0);
  EXPECT_TRUE(d.errors.empty()) << d.errors[0];
  EXPECT_TRUE(d.leaked_blocks.empty());
  ASSERT_EQ(d.steps.size(), 3u);
  EXPECT_EQ(d.steps[0].used_blocks, 18);
  EXPECT_EQ(d.steps[0].free_blocks, 22);
  EXPECT_EQ(d.steps[0].blocks_per_seq, (std::vector<std::pair<int64_t, int>>{{100, 6}, {101, 12}}));
  // seq 100: 5 tokens in 8 slots, seq 101: 13 in 16; three layers each.
  EXPECT_EQ(d.steps[0].wasted_token_slots, 3 * (3 + 3));
  EXPECT_EQ(d.steps[1].used_blocks, 9);
  EXPECT_EQ(d.steps[2].used_blocks, 0);
  EXPECT_EQ(d.peak_used_blocks, 21);  // seq 100 grew before seq 101 was released
  EXPECT_EQ(d.total_blocks, 40);
}

}  // namespace
}  // namespace lantern::harness
