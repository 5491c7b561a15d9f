// CUPTI on the GPU: kernel records attributed to ops and steps (external
// correlation, cuBLAS's own launches, CUDA graph replays), roofline probes,
// manifest GPU fields, and a session recording a CUDA run. Whole engine runs
// and CUPTI's step schedules: cupti_schedule_gpu_test.cpp.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "engine/synth.h"
#include "harness/attribution.h"
#include "harness/clock.h"
#include "harness/cupti_collector.h"
#include "harness/manifest.h"
#include "harness/observer_set.h"
#include "harness/roofline.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"
#include "harness/session.h"
#include "harness/timeline.h"
#include "tests/harness/seed_plan.h"
#include "tests/test_util.h"

cudaError_t lantern_test_busy_kernel(float* out, int n, int spins, cudaStream_t stream);
cudaError_t lantern_test_busy_kernel_occupancy(int block, int* blocks_per_sm, int* regs_per_thread);

namespace lantern::harness {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
using kernels::Family;

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(size_t n) { cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)); }
  ~DeviceBuffer() { cudaFree(p); }
};

// The busy kernel's rows carry the launch lantern_test_busy_kernel made
// (n threads in 128-thread blocks, no shared memory), CUPTI's register count
// equals cudaFuncGetAttributes', and the occupancy computed from the limits
// recorded at start equals the runtime's own calculator.
void expect_busy_launches(const GpuRecords& g, const std::vector<runfmt::KernelRow>& rows, int n) {
  ASSERT_TRUE(g.sm_limits.count(0)) << "device 0's SM limits recorded at start";
  const runfmt::SmLimits& sm = g.sm_limits.at(0);
  EXPECT_TRUE(sm.valid());
  int device_sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(sm.sm_count, device_sms);
  int runtime_blocks = 0, runtime_regs = 0;
  ASSERT_EQ(lantern_test_busy_kernel_occupancy(128, &runtime_blocks, &runtime_regs), cudaSuccess);
  const runfmt::KernelRow* first = nullptr;
  for (const runfmt::KernelRow& r : rows) {
    if (r.kernel.find("busy_kernel") == std::string::npos) continue;
    if (!first) first = &r;
    const runfmt::LaunchConfig& c = r.launch_config;
    EXPECT_EQ(c.grid_x, (n + 127) / 128);
    EXPECT_EQ(c.grid_y, 1);
    EXPECT_EQ(c.grid_z, 1);
    EXPECT_EQ(c.block_x, 128);
    EXPECT_EQ(c.block_y, 1);
    EXPECT_EQ(c.block_z, 1);
    EXPECT_GT(c.regs_per_thread, 0);
    // CUPTI reports the registers allocated to the launch: the compiler's
    // count (cudaFuncGetAttributes) rounded up to the hardware's minimum
    // allocation (H200: numRegs 8 → 16 registers per thread).
    EXPECT_GE(c.regs_per_thread, runtime_regs) << "CUPTI vs cudaFuncGetAttributes";
    EXPECT_LE(c.regs_per_thread, std::max(16, (runtime_regs + 7) / 8 * 8)) << "CUPTI vs cudaFuncGetAttributes";
    EXPECT_EQ(c.static_smem, 0);
    EXPECT_EQ(c.dynamic_smem, 0);
    ASSERT_TRUE(r.occupancy.has_value());
    EXPECT_EQ(r.occupancy->blocks_per_sm, runtime_blocks)
        << "vs cudaOccupancyMaxActiveBlocksPerMultiprocessor";
    EXPECT_GT(r.occupancy->occupancy, 0);
    EXPECT_LE(r.occupancy->occupancy, 1);
    const double wave = static_cast<double>(runtime_blocks) * sm.sm_count;
    EXPECT_DOUBLE_EQ(r.occupancy->waves, c.grid_blocks() / wave);
    EXPECT_EQ(r.occupancy->limit == "grid", c.grid_blocks() < wave) << r.occupancy->limit;
  }
  ASSERT_TRUE(first != nullptr) << "no busy_kernel rows";
  ASSERT_TRUE(first->occupancy.has_value());
  std::printf("[occupancy] busy_kernel grid %d x block 128: %d regs, %d blocks/SM, occupancy %.3f "
              "(%s), %.3f waves; SM limits: %d SMs, %d regs, %lld B smem\n",
              first->launch_config.grid_x, runtime_regs, runtime_blocks, first->occupancy->occupancy,
              first->occupancy->limit.c_str(), first->occupancy->waves, sm.sm_count, sm.regs_per_sm,
              static_cast<long long>(sm.smem_per_sm));
}

TEST(CuptiGpu, KernelsAreAttributedToOpsAndSteps) {
  LANTERN_REQUIRE_GPU();
  Timeline timeline(clock_ns);
  CuptiCollector cupti(&timeline);
  ObserverSet set;
  set.add(&timeline);
  set.add(&cupti);
  cupti.start();
  DeviceBuffer buf(1 << 16);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(cublas, stream), CUBLAS_STATUS_SUCCESS);
  const int n = 256;
  DeviceBuffer a(n * n), b(n * n), c(n * n);
  const float one = 1.0f, zero = 0.0f;

  auto busy = [&] { ASSERT_EQ(lantern_test_busy_kernel(buf.p, 1 << 16, 200, stream), cudaSuccess); };
  for (int s = 0; s < 3; ++s) {
    set.on_step_begin(testing::step_info(s, "decode", 1, 1));
    testing::seed_op(set, "norm_op", -1, Family::rmsnorm, {}, {}, busy, 4.0 * (1 << 16), 0);
    set.on_layer_begin(0);
    testing::seed_op(set, "swiglu_op", 0, Family::swiglu, {}, {}, busy, 8.0 * (1 << 16), 0);
    testing::seed_op(set, "gemm_op", 0, Family::gemm, {}, {}, [&] {
      ASSERT_EQ(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, n, b.p, n, &zero,
                            c.p, n),
                CUBLAS_STATUS_SUCCESS);
    }, 3.0 * n * n * 4, 2.0 * n * n * n);
    set.on_layer_end(0);
    set.on_step_end(testing::step_info(s, "decode", 1, 1));
  }
  busy();  // outside any op: must show up unattributed, not vanish
  CUDA_OK(cudaStreamSynchronize(stream));
  cupti.stop();
  GpuRecords g = cupti.take();
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  EXPECT_EQ(g.dropped_records, 0u);
  EXPECT_TRUE(g.errors.empty()) << g.errors[0];

  const uint64_t origin = timeline.steps().front().begin_ns;
  AttributionStats stats;
  auto rows = attribute_gpu_kernels(g, timeline, Roofline{}, origin, &stats);
  int stray = 0;
  std::map<std::pair<std::string, int64_t>, int> per_op_step;
  for (const runfmt::KernelRow& r : rows) {
    if (r.launch < 0) {
      EXPECT_NE(r.kernel.find("busy_kernel"), std::string::npos)
          << "unexpected kernel outside the ops: " << r.kernel;
      stray += r.kernel.find("busy_kernel") != std::string::npos;
      continue;
    }
    per_op_step[{r.op, r.step}] += 1;
    const OpLaunch& l = timeline.launches()[r.launch];
    EXPECT_EQ(r.op, l.op);
    EXPECT_EQ(r.step, l.step);
    // One clock: a kernel cannot start before the host launched it.
    const double launch_us = (static_cast<double>(l.begin_ns) - static_cast<double>(origin)) / 1e3;
    EXPECT_GE(r.start_us, launch_us - 20.0) << r.kernel << " of " << r.op;
    EXPECT_GT(r.dur_us, 0);
    EXPECT_EQ(r.source, "cupti");
  }
  EXPECT_EQ(stray, 1) << "the kernel launched outside any op is kept, unattributed";
  EXPECT_EQ(stats.unattributed, stray);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ((per_op_step[{"norm_op", s}]), 1) << "step " << s;
    EXPECT_EQ((per_op_step[{"swiglu_op", s}]), 1) << "step " << s;
    EXPECT_GE((per_op_step[{"gemm_op", s}]), 1) << "cuBLAS kernels of step " << s;
  }
  const auto gemm = std::find_if(rows.begin(), rows.end(),
                                 [](const runfmt::KernelRow& r) { return r.op == "gemm_op"; });
  ASSERT_NE(gemm, rows.end());
  EXPECT_EQ(gemm->family, "gemm");
  EXPECT_TRUE(gemm->tflop_per_s.has_value());
  EXPECT_FALSE(g.api_calls.empty());
  expect_busy_launches(g, rows, 1 << 16);
}

TEST(CuptiGpu, GraphReplaysKeepOpLabelsAndLearnTheirStep) {
  LANTERN_REQUIRE_GPU();
  Timeline timeline(clock_ns);
  CuptiCollector cupti(&timeline);
  ObserverSet set;
  set.add(&timeline);
  set.add(&cupti);
  cupti.start();
  DeviceBuffer buf(1 << 14);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto busy = [&] { ASSERT_EQ(lantern_test_busy_kernel(buf.p, 1 << 14, 100, stream), cudaSuccess); };

  // As engine/model.cpp does: at start-up, outside any step, the ops are
  // captured (hooks with kCapture); every step launches the graph, and the
  // replay's accounting hooks (kReplay) follow the launch.
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  testing::seed_op(set, "captured_a", 2, Family::residual, {}, {}, busy, 1e6, 0, OpInfo::kCapture);
  testing::seed_op(set, "captured_b", 2, Family::swiglu, {}, {}, busy, 1e6, 0, OpInfo::kCapture);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int s = 10; s < 13; ++s) {
    set.on_step_begin(testing::step_info(s, "decode", 1, 1));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    testing::seed_op(set, "captured_a", 2, Family::residual, {}, {}, [] {}, 1e6, 0, OpInfo::kReplay);
    testing::seed_op(set, "captured_b", 2, Family::swiglu, {}, {}, [] {}, 1e6, 0, OpInfo::kReplay);
    set.on_step_end(testing::step_info(s, "decode", 1, 1));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  cupti.stop();
  GpuRecords g = cupti.take();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  EXPECT_EQ(g.dropped_records, 0u);
  EXPECT_GE(g.launch_of_graph_node.size(), 2u) << "graph nodes created while ops were captured";

  auto rows = attribute_gpu_kernels(g, timeline, Roofline{}, timeline.steps().front().begin_ns);
  ASSERT_EQ(rows.size(), 6u) << "2 kernels x 3 replays";
  std::multiset<std::pair<std::string, int64_t>> got;
  for (const auto& r : rows) {
    EXPECT_NE(r.graph_node, 0u);
    EXPECT_EQ(r.layer, 2);
    ASSERT_GE(r.launch, 0);
    EXPECT_EQ(timeline.launches()[r.launch].graph, OpInfo::kCapture) << "labelled by the capture";
    EXPECT_DOUBLE_EQ(r.bytes, 1e6) << "each replay is one op instance";
    got.insert({r.op, r.step});
  }
  std::multiset<std::pair<std::string, int64_t>> want;
  for (int s = 10; s < 13; ++s) {
    want.insert({"captured_a", s});
    want.insert({"captured_b", s});
  }
  EXPECT_EQ(got, want);
}

TEST(CuptiGpu, RooflineProbesArePlausible) {
  LANTERN_REQUIRE_GPU();
  RooflineResult r = measure_roofline(256ull << 20, 4096, 5);
  std::printf("[roofline] copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", r.copy_gb_per_s,
              r.gemm_tflop_per_s);
  EXPECT_GT(r.copy_gb_per_s, 100.0);
  EXPECT_LT(r.copy_gb_per_s, 20000.0);
  EXPECT_GT(r.gemm_tflop_per_s, 10.0);
  EXPECT_LT(r.gemm_tflop_per_s, 5000.0);
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["gemm_n"], 4096);
}

TEST(CuptiGpu, ManifestDescribesTheGpu) {
  LANTERN_REQUIRE_GPU();
  nlohmann::json gpu = gpu_info(0);
  EXPECT_FALSE(gpu["name"].get<std::string>().empty());
  EXPECT_EQ(gpu["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
  EXPECT_EQ(gpu["uuid"].get<std::string>().size(), 40u);
  EXPECT_GT(gpu["sm_count"].get<int>(), 0);
  EXPECT_GT(gpu["memory_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(gpu["sm_clock_khz"].get<int>(), 0);
  nlohmann::json v = library_versions(true);
  EXPECT_TRUE(v["cuda_driver"].is_string());
  EXPECT_TRUE(v["cuda_runtime"].is_string());
  EXPECT_TRUE(v["cupti_api"].is_number());
}

TEST(CuptiGpu, SessionRecordsACudaRun) {
  LANTERN_REQUIRE_GPU();
  auto dir = test::scratch_dir("cupti-session") / "run";
  HarnessOptions o;
  o.record_dir = dir;
  Session session(o);
  EngineOptions eo;
  eo.backend = kernels::Backend::cuda;
  session.apply(eo);
  DeviceBuffer buf(1 << 16);
  auto busy = [&] { ASSERT_EQ(lantern_test_busy_kernel(buf.p, 1 << 16, 50, nullptr), cudaSuccess); };
  auto a = testing::make_seed_arena();
  eo.observer->on_arena(a->arena);
  for (int s = 0; s < 3; ++s) testing::run_seed_step(*eo.observer, *a, s, s ? "decode" : "prefill", 1, busy);
  CUDA_OK(cudaDeviceSynchronize());
  EngineSummary summary;
  summary.backend = kernels::Backend::cuda;
  session.finish(summary);
  runfmt::Run run = runfmt::RunReader::open(dir);
  EXPECT_EQ(run.manifest.backend, "cuda");
  EXPECT_TRUE(run.manifest.copy_gb_per_s.has_value());
  EXPECT_TRUE(run.manifest.gemm_tflop_per_s.has_value());
  EXPECT_TRUE(run.manifest.json["gpu"]["name"].is_string());
  EXPECT_EQ(run.manifest.json["harness"]["kernel_timing"], "cupti");
  // The GPU's clocks over the run (NVML; harness/gpu_clocks.h).
  const nlohmann::json& clocks = run.manifest.json["gpu"]["clocks"];
  ASSERT_TRUE(clocks.is_object() && !clocks.contains("error")) << run.manifest.json["gpu"].dump();
  EXPECT_GT(clocks["sm_mhz_end"].get<int>(), 0);
  EXPECT_GT(clocks["seconds"].get<double>(), 0);
  EXPECT_TRUE(clocks["throttled"].is_boolean());
  ASSERT_EQ(run.kernels.size(), static_cast<size_t>(3 * testing::seed_ops_per_step(1)));
  for (const auto& k : run.kernels) {
    EXPECT_EQ(k.source, "cupti");
    EXPECT_GE(k.launch, 0);
    EXPECT_TRUE(k.pct_roofline.has_value()) << k.op;
    // Through kernels.csv: the busy kernel's launch and its occupancy.
    EXPECT_EQ(k.launch_config.grid_x, (1 << 16) / 128) << k.kernel;
    EXPECT_EQ(k.launch_config.block_x, 128) << k.kernel;
    EXPECT_GT(k.launch_config.regs_per_thread, 0) << k.kernel;
    ASSERT_TRUE(k.occupancy.has_value()) << k.kernel;
    EXPECT_GT(k.occupancy->occupancy, 0);
    EXPECT_LE(k.occupancy->occupancy, 1);
  }
  auto sm = runfmt::sm_limits_from_json(run.manifest.json["gpu"]["sm_limits"]);
  ASSERT_TRUE(sm.has_value()) << run.manifest.json["gpu"].dump();
  EXPECT_TRUE(sm->valid());
  EXPECT_EQ(sm->sm_count, run.manifest.json["gpu"]["sm_count"].get<int>());
  EXPECT_EQ(run.memory.violation_count, 0);
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
  const bool gpu_track = std::any_of(run.trace.begin(), run.trace.end(), [](const runfmt::TraceEvent& e) {
    return e.pid == runfmt::track::kGpuPid && e.cat == "kernel";
  });
  EXPECT_TRUE(gpu_track);
}

}  // namespace
}  // namespace lantern::harness
