// Attribution of GPU kernel records to ops (external correlation, CUDA graph
// nodes), cost splitting and roofline share, on synthetic CUPTI data.
#include "harness/attribution.h"

#include <gtest/gtest.h>

#include "tests/harness/seed_plan.h"

namespace lantern::harness {
namespace {

uint64_t g_ns = 0;
uint64_t fake_clock() { return g_ns += 1000; }

GpuActivity kernel(uint64_t start, uint64_t end, uint32_t corr, uint32_t name, uint64_t node = 0) {
  GpuActivity a;
  a.kind = GpuActivityKind::kernel;
  a.start_ns = start;
  a.end_ns = end;
  a.correlation = corr;
  a.name = name;
  a.stream = 7;
  a.graph_node = node;
  return a;
}

// The launch configuration travels from the CUPTI record to the row, with
// the occupancy it implies on the kernel's device (none without its limits).
TEST(Attribution, RowsCarryLaunchConfigAndOccupancyOfTheirDevice) {
  g_ns = 0;
  Timeline t(fake_clock);
  GpuRecords g;
  g.names = {"k"};
  GpuActivity on_h200 = kernel(100'000, 101'000, 1, 0);
  // 64 regs x 256 threads: 4 blocks/SM by registers
  on_h200.launch = {.grid_x = 66, .grid_y = 1, .grid_z = 1, .block_x = 256, .block_y = 1,
                    .block_z = 1, .static_smem = 1024, .dynamic_smem = 4096,
                    .smem_config = 32768, .regs_per_thread = 64};
  GpuActivity on_unknown = on_h200;
  on_unknown.device = 3;
  on_unknown.start_ns = 102'000;
  on_unknown.end_ns = 103'000;
  g.activities = {on_h200, on_unknown};
  g.sm_limits[0] = runfmt::sm90_limits(132);
  auto rows = attribute_gpu_kernels(g, t, Roofline{}, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].launch_config, on_h200.launch);
  ASSERT_TRUE(rows[0].occupancy.has_value());
  EXPECT_EQ(rows[0].occupancy->blocks_per_sm, 4);
  EXPECT_EQ(rows[0].occupancy->limit, "grid");  // 66 blocks < 4 x 132
  EXPECT_DOUBLE_EQ(rows[0].occupancy->occupancy, 66.0 / 132 * 8 / 64);
  EXPECT_EQ(rows[1].launch_config, on_h200.launch);
  EXPECT_FALSE(rows[1].occupancy.has_value()) << "device 3 has no recorded limits";
}

TEST(Attribution, KernelsFindTheirOpsStepsAndRates) {
  g_ns = 0;
  Timeline t(fake_clock);
  auto a = testing::make_seed_arena();
  // Step 0: two ops, launches 0 ("q_proj", 4 MB / 8 GFLOP) and 1 ("swiglu", 1 MB).
  t.on_step_begin(testing::step_info(0, "prefill", 1, 8));
  testing::seed_op(t, "q_proj", 0, kernels::Family::gemm, {a->xn}, {a->q}, [] {}, 4e6, 8e9);
  testing::seed_op(t, "swiglu", 0, kernels::Family::swiglu, {}, {}, [] {}, 1e6, 0);
  t.on_step_end(testing::step_info(0, "prefill", 1, 8));
  ASSERT_EQ(t.launches().size(), 2u);

  GpuRecords g;
  g.names = {"gemm_main", "gemm_reduce", "swiglu_kernel", "stray"};
  // q_proj launched two kernels (3 us + 1 us), swiglu one (2 us), one kernel
  // came from outside any op.
  g.activities = {kernel(100'000, 103'000, 11, 0), kernel(103'000, 104'000, 12, 1),
                  kernel(105'000, 107'000, 13, 2), kernel(108'000, 109'000, 14, 3)};
  g.launch_of_correlation = {{11, 0}, {12, 0}, {13, 1}};
  g.step_of_correlation = {{11, 0}, {12, 0}, {13, 0}};
  GpuActivity copy;
  copy.kind = GpuActivityKind::memcpy;
  g.activities.push_back(copy);

  Roofline roof;
  roof.copy_gb_per_s = 1000.0;    // 1 MB takes 1 us
  roof.gemm_tflop_per_s = 100.0;  // 8 GFLOP take 80 us
  AttributionStats stats;
  auto rows = attribute_gpu_kernels(g, t, roof, 50'000, &stats);
  ASSERT_EQ(rows.size(), 4u) << "kernels only, not the memcpy";
  EXPECT_EQ(stats.kernels, 4);
  EXPECT_EQ(stats.unattributed, 1);

  const runfmt::KernelRow& k0 = rows[0];
  EXPECT_EQ(k0.kernel, "gemm_main");
  EXPECT_EQ(k0.op, "q_proj");
  EXPECT_EQ(k0.family, "gemm");
  EXPECT_EQ(k0.variant_name, testing::cpu_entry(kernels::Family::gemm)->name);
  EXPECT_EQ(k0.layer, 0);
  EXPECT_EQ(k0.step, 0);
  EXPECT_EQ(k0.phase, "prefill");
  EXPECT_EQ(k0.launch, 0);
  EXPECT_EQ(k0.source, "cupti");
  EXPECT_EQ(k0.stream, 7);
  EXPECT_DOUBLE_EQ(k0.start_us, 50.0);
  EXPECT_DOUBLE_EQ(k0.dur_us, 3.0);
  // The op's 4 MB and 8 GFLOP split 3:1 over its two kernels; rates use the op's 4 us.
  EXPECT_DOUBLE_EQ(k0.bytes, 3e6);
  EXPECT_DOUBLE_EQ(rows[1].bytes, 1e6);
  EXPECT_DOUBLE_EQ(k0.flops + rows[1].flops, 8e9);
  EXPECT_DOUBLE_EQ(*k0.gb_per_s, 4e6 / 4e-6 / 1e9);
  EXPECT_DOUBLE_EQ(*k0.tflop_per_s, 8e9 / 4e-6 / 1e12);
  EXPECT_DOUBLE_EQ(*k0.pct_roofline, 80.0 / 4.0 * 100.0);  // compute bound: 80 us ideal
  EXPECT_EQ(k0.pct_roofline, rows[1].pct_roofline);

  const runfmt::KernelRow& sw = rows[2];
  EXPECT_EQ(sw.op, "swiglu");
  EXPECT_DOUBLE_EQ(*sw.pct_roofline, 1.0 / 2.0 * 100.0);  // 1 MB: 1 us ideal of 2 us
  EXPECT_FALSE(sw.tflop_per_s.has_value()) << "no FLOPs declared";

  const runfmt::KernelRow& stray = rows[3];
  EXPECT_EQ(stray.launch, -1);
  EXPECT_EQ(stray.op, "");
  EXPECT_EQ(stray.step, -1);
  EXPECT_FALSE(stray.gb_per_s.has_value());
}

TEST(Attribution, GraphReplaysUseNodeOwnersAndTheReplayStep) {
  g_ns = 0;
  Timeline t(fake_clock);
  // Capture: ops run once outside steps, creating graph nodes 501 and 502.
  testing::seed_op(t, "rmsnorm_op", 3, kernels::Family::rmsnorm, {}, {}, [] {}, 2e6, 0);
  testing::seed_op(t, "gemm_op", 3, kernels::Family::gemm, {}, {}, [] {}, 1e6, 1e9);
  for (int s = 5; s < 7; ++s) {  // replays in steps 5 and 6 (no op hooks)
    t.on_step_begin(testing::step_info(s, "decode", 1, 1));
    t.on_step_end(testing::step_info(s, "decode", 1, 1));
  }
  GpuRecords g;
  g.names = {"norm", "gemm"};
  g.launch_of_graph_node = {{501, 0}, {502, 1}};
  // Each replay: the graph launch call (correlation 90 / 91) ran in step 5 / 6.
  g.step_of_correlation = {{90, 5}, {91, 6}};
  g.activities = {kernel(1000, 2000, 90, 0, 501), kernel(2000, 4000, 90, 1, 502),
                  kernel(5000, 6000, 91, 0, 501), kernel(6000, 8000, 91, 1, 502)};
  auto rows = attribute_gpu_kernels(g, t, Roofline{}, 0);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].op, "rmsnorm_op");
  EXPECT_EQ(rows[0].step, 5);
  EXPECT_EQ(rows[0].phase, "decode");
  EXPECT_EQ(rows[0].layer, 3);
  EXPECT_EQ(rows[0].graph_node, 501u);
  EXPECT_EQ(rows[1].op, "gemm_op");
  EXPECT_EQ(rows[3].step, 6);
  // Each replay is its own op instance: full cost per replay, not split over two.
  EXPECT_DOUBLE_EQ(rows[0].bytes, 2e6);
  EXPECT_DOUBLE_EQ(rows[2].bytes, 2e6);
  EXPECT_DOUBLE_EQ(*rows[1].gb_per_s, 1e6 / 2e-6 / 1e9);
  EXPECT_FALSE(rows[0].pct_roofline.has_value()) << "no roofline measured";
}

// attention_decode's cost follows each step's contexts: the engine
// recomputes it before every replay hook, so a replay's kernel rows carry the
// replay's cost, not the capture's (pad rows at context 0 or 1: a 30x
// under-count of the batch-256 KV read before session 9). Ops whose cost did
// not change record nothing.
TEST(Attribution, ReplaysCarryTheCostTheirReplayDeclared) {
  g_ns = 0;
  Timeline t(fake_clock);
  OpInfo replay_ops[2];
  for (OpInfo& o : replay_ops) {
    o.graph = OpInfo::kReplay;
    o.graph_kernels = 1;
  }
  testing::seed_op(t, "attn_norm", 0, kernels::Family::rmsnorm, {}, {}, [] {}, 2e6, 0, OpInfo::kCapture);
  testing::seed_op(t, "attention_decode", 0, kernels::Family::attention_decode, {}, {}, [] {}, 1e5, 1e6,
                   OpInfo::kCapture);
  replay_ops[0].cost = kernels::Cost{2e6, 0};
  replay_ops[1].cost = kernels::Cost{1e5, 1e6};
  t.on_graph_captured(GraphReplay{4, replay_ops, 2});
  const double kv_bytes[2] = {3e7, 5e7};
  for (int s : {5, 6}) {
    replay_ops[1].cost = kernels::Cost{kv_bytes[s - 5], 2e7 * (s - 4)};  // what refresh_decode_costs does
    t.on_step_begin(testing::step_info(s, "decode", 64, 64));
    t.on_graph_replay(GraphReplay{4, replay_ops, 2});
    t.on_step_end(testing::step_info(s, "decode", 64, 64));
  }
  ASSERT_EQ(t.replay_costs().size(), 2u) << "only the op whose cost changed";
  EXPECT_EQ(t.replay_costs()[0].launch, 1u);
  EXPECT_EQ(t.replay_costs()[1].step, 6);
  GpuRecords g;
  g.names = {"norm", "attention"};
  g.launch_of_graph_node = {{501, 0}, {502, 1}};
  g.step_of_correlation = {{90, 5}, {91, 6}};
  g.activities = {kernel(1000, 2000, 90, 0, 501), kernel(2000, 12000, 90, 1, 502),
                  kernel(13000, 14000, 91, 0, 601), kernel(14000, 24000, 91, 1, 602)};
  Roofline roof;
  roof.copy_gb_per_s = 4000;
  auto rows = attribute_gpu_kernels(g, t, roof, 0);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_DOUBLE_EQ(rows[0].bytes, 2e6);
  EXPECT_DOUBLE_EQ(rows[1].bytes, 3e7) << "step 5's contexts, not the capture's";
  EXPECT_DOUBLE_EQ(rows[1].flops, 2e7);
  EXPECT_DOUBLE_EQ(*rows[1].gb_per_s, 3e7 / 10e-6 / 1e9);
  EXPECT_DOUBLE_EQ(*rows[1].pct_roofline, 3e7 / 4000e9 / 10e-6 * 100);
  EXPECT_EQ(rows[3].step, 6);
  EXPECT_DOUBLE_EQ(rows[3].bytes, 5e7);
  EXPECT_DOUBLE_EQ(rows[2].bytes, 2e6);
}

TEST(Attribution, ReplaysWithUnknownNodesAreLabelledByPosition) {
  g_ns = 0;
  Timeline t(fake_clock);
  // At start-up ops 0 and 1 are captured (nodes 501, 502) into graph slot 3
  // (kernel-node counts unknown); step 5 replays it; steps 9 and 11 replay
  // slot 3 again, after CUPTI was detached and re-attached: their node ids
  // (601.., 701..) were never seen created.
  OpInfo uncounted[2];
  for (OpInfo& o : uncounted) o.graph = OpInfo::kReplay;
  testing::seed_op(t, "rmsnorm_op", 0, kernels::Family::rmsnorm, {}, {}, [] {}, 2e6, 0, OpInfo::kCapture);
  testing::seed_op(t, "gemm_op", 0, kernels::Family::gemm, {}, {}, [] {}, 1e6, 1e9, OpInfo::kCapture);
  t.on_graph_captured(GraphReplay{3, uncounted, 2});
  t.on_step_begin(testing::step_info(5, "decode", 1, 1));
  t.on_graph_replay(GraphReplay{3, uncounted, 2});
  t.on_step_end(testing::step_info(5, "decode", 1, 1));
  for (int s : {9, 11, 12, 13}) {
    t.on_step_begin(testing::step_info(s, "decode", 1, 1));
    t.on_graph_replay(GraphReplay{s == 12 ? 4 : 3, nullptr, 2});
    t.on_step_end(testing::step_info(s, "decode", 1, 1));
  }
  GpuRecords g;
  g.names = {"norm", "gemm", "other"};
  g.launch_of_graph_node = {{501, 0}, {502, 1}};
  g.step_of_correlation = {{90, 5}, {91, 9}, {92, 11}, {93, 12}, {94, 13}};
  g.activities = {kernel(1000, 2000, 90, 0, 501), kernel(2000, 4000, 90, 1, 502),
                  // step 9: the same chain, new ids
                  kernel(5000, 6000, 91, 0, 601), kernel(6000, 8000, 91, 1, 602),
                  // step 11: three kernels -- not the chain of slot 3
                  kernel(9000, 9500, 92, 0, 701), kernel(9500, 9800, 92, 1, 702),
                  kernel(9800, 9900, 92, 2, 703),
                  // step 12: slot 4, of which no labelled replay exists
                  kernel(10000, 11000, 93, 0, 801), kernel(11000, 12000, 93, 1, 802),
                  // step 13: slot 3, two kernels, but the second is another function
                  kernel(13000, 14000, 94, 0, 901), kernel(14000, 15000, 94, 2, 902)};
  AttributionStats stats;
  auto rows = attribute_gpu_kernels(g, t, Roofline{}, 0, &stats);
  ASSERT_EQ(rows.size(), 11u);
  EXPECT_EQ(rows[2].op, "rmsnorm_op");
  EXPECT_EQ(rows[2].launch, 0);
  EXPECT_EQ(rows[2].step, 9);
  EXPECT_EQ(rows[2].family, "rmsnorm");
  EXPECT_EQ(rows[3].op, "gemm_op");
  EXPECT_DOUBLE_EQ(rows[3].bytes, 1e6) << "a labelled replay is a full op instance";
  for (size_t i = 4; i < 11; ++i) EXPECT_EQ(rows[i].launch, -1) << "row " << i;
  EXPECT_EQ(stats.by_position, 2);
  EXPECT_EQ(stats.unattributed, 7);
}

TEST(Attribution, ReplaysOfGraphsCapturedUnseenAreLabelledFromCaptureCounts) {
  g_ns = 0;
  Timeline t(fake_clock);
  // At start-up three ops are captured into slot 1 while CUPTI is detached
  // (or its node ids are lost): the engine counted 1, 2 and 1 kernel nodes
  // and reports them with the graph's ops once the capture ended. Steps 6
  // and 7 replay slot 1 under CUPTI (nodes never seen created, and no
  // labelled replay exists). Slot 2 (step 8) was captured with one op whose
  // count is unknown.
  OpInfo replay_ops[3];
  for (int k = 0; k < 3; ++k) {
    replay_ops[k].graph = OpInfo::kReplay;
    replay_ops[k].graph_kernels = k == 1 ? 2 : 1;
  }
  testing::seed_op(t, "attn_norm", 0, kernels::Family::rmsnorm, {}, {}, [] {}, 1e6, 0, OpInfo::kCapture);
  testing::seed_op(t, "q_proj", 0, kernels::Family::gemm, {}, {}, [] {}, 4e6, 8e9, OpInfo::kCapture);
  testing::seed_op(t, "swiglu", 0, kernels::Family::swiglu, {}, {}, [] {}, 2e6, 0, OpInfo::kCapture);
  t.on_graph_captured(GraphReplay{1, replay_ops, 3});
  OpInfo unknown;
  unknown.graph = OpInfo::kReplay;
  testing::seed_op(t, "embed", -1, kernels::Family::embedding, {}, {}, [] {}, 1e6, 0, OpInfo::kCapture);
  t.on_graph_captured(GraphReplay{2, &unknown, 1});
  for (int s : {6, 7}) {
    t.on_step_begin(testing::step_info(s, "decode", 1, 1));
    t.on_graph_replay(GraphReplay{1, replay_ops, 3});
    t.on_step_end(testing::step_info(s, "decode", 1, 1));
  }
  t.on_step_begin(testing::step_info(8, "decode", 2, 2));
  t.on_graph_replay(GraphReplay{2, &unknown, 1});
  t.on_step_end(testing::step_info(8, "decode", 2, 2));
  ASSERT_EQ(t.captures().size(), 2u);
  EXPECT_EQ(t.captures()[1].first_launch, 3u);
  ASSERT_EQ(t.launches()[0].graph_kernels, 1);
  ASSERT_EQ(t.launches()[1].graph_kernels, 2);
  ASSERT_EQ(t.launches()[3].graph_kernels, -1);
  EXPECT_TRUE(t.errors().empty());

  GpuRecords g;
  g.names = {"norm", "gemm_main", "gemm_reduce", "swiglu", "embed"};
  g.step_of_correlation = {{70, 6}, {71, 7}, {72, 8}};
  g.activities = {// step 6: the whole chain, 4 kernels
                  kernel(1000, 2000, 70, 0, 9001), kernel(2000, 5000, 70, 1, 9002),
                  kernel(5000, 6000, 70, 2, 9003), kernel(6000, 7000, 70, 3, 9004),
                  // step 7: a kernel missing (3 for 4 counted nodes): left alone
                  kernel(8000, 9000, 71, 0, 9101), kernel(9000, 9500, 71, 1, 9102),
                  kernel(9500, 9800, 71, 3, 9104),
                  // step 8: slot 2, count unknown
                  kernel(10000, 10500, 72, 4, 9201)};
  AttributionStats stats;
  auto rows = attribute_gpu_kernels(g, t, Roofline{}, 0, &stats);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].op, "attn_norm");
  EXPECT_EQ(rows[1].op, "q_proj");
  EXPECT_EQ(rows[2].op, "q_proj");
  EXPECT_EQ(rows[3].op, "swiglu");
  EXPECT_EQ(rows[1].launch, 1);
  EXPECT_EQ(rows[2].launch, 1);
  EXPECT_EQ(rows[3].step, 6);
  EXPECT_EQ(rows[1].family, "gemm");
  // q_proj's 4 MB split over its two kernels by duration (3 us + 1 us).
  EXPECT_DOUBLE_EQ(rows[1].bytes, 3e6);
  EXPECT_DOUBLE_EQ(rows[2].bytes, 1e6);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(rows[i].launch, -1) << "row " << i;
  EXPECT_EQ(stats.by_capture, 4);
  EXPECT_EQ(stats.by_position, 0);
  EXPECT_EQ(stats.unattributed, 4);
}

TEST(Attribution, HostRowsTimeOpsOnTheCpuBackend) {
  g_ns = 0;
  Timeline t(fake_clock);
  auto a = testing::make_seed_arena();
  testing::run_seed_step(t, *a, 0, "prefill", 1);
  auto rows = host_kernel_rows(t, Roofline{}, 0);
  ASSERT_EQ(rows.size(), static_cast<size_t>(testing::seed_ops_per_step(1)));
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].launch, static_cast<int64_t>(i));
    EXPECT_EQ(rows[i].source, "host");
    EXPECT_EQ(rows[i].phase, "prefill");
    EXPECT_DOUBLE_EQ(rows[i].dur_us, 1.0);
    EXPECT_DOUBLE_EQ(rows[i].bytes, 1e6);
    EXPECT_DOUBLE_EQ(*rows[i].gb_per_s, 1e6 / 1e-6 / 1e9);
  }
  EXPECT_EQ(rows[2].op, "q_proj");
  EXPECT_EQ(rows[2].kernel, std::string("gemm.") + testing::cpu_entry(kernels::Family::gemm)->name);
}

}  // namespace
}  // namespace lantern::harness
