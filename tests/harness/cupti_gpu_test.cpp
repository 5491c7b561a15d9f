// CUPTI on the GPU: kernel records attributed to ops and steps (external
// correlation, cuBLAS's own launches, CUDA graph replays), roofline probes,
// manifest GPU fields, and whole recorded runs on the CUDA backend.
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

// Records a run of the tiny synthetic model on the CUDA backend: `o` (with
// record_dir set) drives the harness, `submit` queues the requests.
template <class Submit>
runfmt::Run record_tiny_cuda_run(const char* name, uint64_t seed, HarnessOptions o, int max_seqs,
                                 Submit&& submit) {
  auto model = test::scratch_dir(strformat("%s-model", name));
  SynthOptions so;
  so.seed = seed;
  so.with_tokenizer = false;
  write_synthetic_model(synth_preset("tiny"), model, so);
  o.record_dir = test::scratch_dir(name) / "run";
  Session session(o);
  ModelConfig cfg = ModelConfig::load(model);
  EngineOptions eo;
  eo.backend = kernels::Backend::cuda;
  eo.limits.max_context = std::min(256, cfg.max_position_embeddings);
  eo.limits.max_seqs = max_seqs;
  eo.limits.kv_num_blocks = max_seqs * cfg.num_layers * 16;
  session.apply(eo);
  {
    Engine engine(cfg, Weights::load(cfg, model, kernels::Backend::cuda), eo);
    session.set_config(engine.describe());
    submit(engine, cfg);
    engine.run_until_idle();
    for (const auto& r : engine.take_finished()) session.on_result(r, "");
    session.finish(engine);
  }
  return runfmt::RunReader::open(o.record_dir);
}

TEST(CuptiGpu, EngineRunOnCudaIsRecordedAndClean) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  runfmt::Run run = record_tiny_cuda_run("cupti-engine", 5, HarnessOptions{}, 4,
                                         [](Engine& engine, const ModelConfig& cfg) {
    for (int i = 0; i < 3; ++i) {
      Request r;
      for (int t = 0; t < 6 + 5 * i; ++t) r.prompt.push_back((31 * t + i) % cfg.vocab_size);
      r.max_new_tokens = 8;
      r.stop_at_eos = false;
      engine.submit(std::move(r));
    }
  });
  EXPECT_EQ(run.memory.violation_count, 0)
      << (run.memory.violations.empty() ? "" : run.memory.violations[0].message);
  EXPECT_TRUE(run.kv.leaked_blocks.empty());
  EXPECT_TRUE(run.kv.errors.empty());
  EXPECT_EQ(run.metrics["harness"]["cupti_dropped_records"], 0);
  ASSERT_FALSE(run.kernels.empty());
  size_t attributed = 0, from_graphs = 0, graphs_attributed = 0;
  for (const auto& k : run.kernels) {
    attributed += k.launch >= 0;
    from_graphs += k.graph_node != 0;
    graphs_attributed += k.graph_node != 0 && k.launch >= 0 && !k.op.empty() && k.step >= 0;
  }
  std::printf("[engine-cuda] %zu kernels, %zu attributed, %zu replayed from CUDA graphs\n",
              run.kernels.size(), attributed, from_graphs);
  std::string first_unattributed;
  for (const auto& k : run.kernels)
    if (k.launch < 0 && first_unattributed.empty()) first_unattributed = k.kernel;
  EXPECT_EQ(attributed, run.kernels.size())
      << "every kernel runs inside an op (incl. the KV table scatter); first outside: "
      << first_unattributed;
  EXPECT_EQ(run.metrics["harness"]["unattributed_kernels"], 0);
  EXPECT_EQ(graphs_attributed, from_graphs) << "graph-replayed kernels keep op and step";
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
  // Every kernel, eager, cuBLAS or replayed from a graph, has its launch
  // configuration and an occupancy in (0, 1].
  std::map<std::string, int> limits;
  for (const auto& k : run.kernels) {
    EXPECT_TRUE(k.launch_config.known()) << k.kernel;
    ASSERT_TRUE(k.occupancy.has_value()) << k.kernel;
    EXPECT_GT(k.occupancy->blocks_per_sm, 0) << k.kernel;
    EXPECT_GT(k.occupancy->occupancy, 0) << k.kernel;
    EXPECT_LE(k.occupancy->occupancy, 1) << k.kernel;
    limits[k.occupancy->limit] += 1;
  }
  for (const auto& [limit, n] : limits) std::printf("[engine-cuda] occupancy limit %s: %d kernels\n", limit.c_str(), n);
}

TEST(CuptiGpu, CuptiEveryNTracesPrefillAndEveryNthDecodeStepOnly) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  HarnessOptions o;
  o.cupti_config.kernel_every = 4;
  o.roofline = false;
  runfmt::Run run = record_tiny_cuda_run("cupti-every", 9, o, 2, [](Engine& engine, const ModelConfig& cfg) {
    Request r;
    for (int t = 0; t < 7; ++t) r.prompt.push_back((17 * t + 3) % cfg.vocab_size);
    r.max_new_tokens = 12;  // step 0 prefills (and samples token 1), steps 1..11 decode
    r.stop_at_eos = false;
    engine.submit(std::move(r));
  });
  std::set<int64_t> steps;
  size_t replayed = 0;
  for (const auto& k : run.kernels) {
    steps.insert(k.step);
    if (k.graph_node != 0) {
      ++replayed;
      EXPECT_GE(k.launch, 0) << "graphs captured at start-up label their replays in sampled steps";
      EXPECT_FALSE(k.op.empty());
    }
  }
  EXPECT_EQ(steps, (std::set<int64_t>{0, 4, 8})) << "prefill step 0, decode steps 4 and 8";
  EXPECT_GT(replayed, 0u);
  EXPECT_EQ(run.metrics["harness"]["cupti_sampled_steps"], 3);
  EXPECT_EQ(run.metrics["harness"]["cupti_skipped_steps"], 9);
  EXPECT_EQ(run.manifest.json["harness"]["cupti_every"], 4);
  EXPECT_EQ(run.metrics["harness"]["cupti_dropped_records"], 0);
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

// Windows: CUPTI attached for steps 0-2, 6-8, 12-13 (3 of every 6) and
// detached with cuptiFinalize in between. The decode graphs are captured at
// start-up (attached); replays in later windows must keep their op labels:
// by graph node id if the ids survive a detach, else by position in the
// replay (attribution.h). The test prints which one it was.
TEST(CuptiGpu, CuptiWindowsTraceOnlyWindowStepsAndKeepGraphLabels) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  HarnessOptions o;
  o.cupti_config.window_steps = 3;
  o.cupti_config.window_period = 6;
  o.roofline = false;
  runfmt::Run run = record_tiny_cuda_run("cupti-window", 11, o, 2, [](Engine& engine, const ModelConfig& cfg) {
    Request r;
    for (int t = 0; t < 5; ++t) r.prompt.push_back((13 * t + 1) % cfg.vocab_size);
    r.max_new_tokens = 14;  // steps 0..13
    r.stop_at_eos = false;
    engine.submit(std::move(r));
  });
  std::set<int64_t> steps;
  size_t replayed = 0, replayed_labelled = 0;
  for (const auto& k : run.kernels) {
    steps.insert(k.step);
    if (k.graph_node != 0) {
      ++replayed;
      replayed_labelled += k.launch >= 0 && !k.op.empty();
    }
  }
  EXPECT_EQ(steps, (std::set<int64_t>{0, 1, 2, 6, 7, 8, 12, 13}));
  EXPECT_GT(replayed, 0u);
  EXPECT_EQ(replayed_labelled, replayed);
  std::printf("[cupti-window] %zu replayed kernels, %lld labelled by position (0: node ids survive "
              "cuptiFinalize)\n",
              replayed, run.metrics["harness"].value("kernels_labelled_by_position", -1LL));
  EXPECT_EQ(run.metrics["harness"]["cupti_sampled_steps"], 8);
  EXPECT_EQ(run.metrics["harness"]["cupti_skipped_steps"], 6);
  EXPECT_EQ(run.metrics["harness"]["cupti_kernel_toggles"], 4) << "detach, attach, detach, attach";
  EXPECT_EQ(run.metrics["harness"]["cupti_dropped_records"], 0);
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

std::set<int64_t> kernel_steps(const runfmt::Run& run) {
  std::set<int64_t> steps;
  for (const auto& k : run.kernels) steps.insert(k.step);
  return steps;
}

// Graphs whose node ids CUPTI never saw (windows 1:4: attached in steps 0,
// 4, 8, 12, and no graph-node callbacks, as when the ids are lost): their
// replays are labelled from the engine's per-op kernel-node counts told at
// start-up capture (on_graph_captured). The labels must be the ones CUPTI's
// node ids give when it saw the capture (same model, same prompt, CUPTI
// attached throughout).
void expect_capture_labels_match_node_labels(int num_seqs) {
  SCOPED_TRACE(strformat("%d sequences", num_seqs));
  auto submit = [num_seqs](Engine& engine, const ModelConfig& cfg) {
    for (int i = 0; i < num_seqs; ++i) {
      Request r;
      for (int t = 0; t < 6; ++t) r.prompt.push_back((41 * t + 7 + 3 * i) % cfg.vocab_size);
      r.max_new_tokens = 14;  // steps 0..13
      r.stop_at_eos = false;
      engine.submit(std::move(r));
    }
  };
  HarnessOptions windows;
  windows.cupti_config.window_steps = 1;
  windows.cupti_config.window_period = 4;
  windows.roofline = false;
  HarnessOptions all = windows;
  all.cupti_config.window_period = 0;
  all.cupti_config.window_budget = 0;
  windows.cupti_config.graph_node_callbacks = false;
  const std::string name = strformat("cupti-capture-%d", num_seqs);
  runfmt::Run w = record_tiny_cuda_run((name + "-detached").c_str(), 19, windows, num_seqs, submit);
  runfmt::Run a = record_tiny_cuda_run((name + "-attached").c_str(), 19, all, num_seqs, submit);
  EXPECT_EQ(kernel_steps(w), (std::set<int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(w.metrics["harness"]["cupti_kernel_toggles"], 7);
  EXPECT_GT(w.metrics["harness"]["kernels_labelled_by_capture"].get<int64_t>(), 0);
  EXPECT_EQ(w.metrics["harness"]["unattributed_kernels"], 0);
  EXPECT_EQ(a.metrics["harness"]["kernels_labelled_by_capture"], 0) << "node ids labelled every replay";
  EXPECT_TRUE(w.metrics["harness"]["cupti_errors"].empty()) << w.metrics["harness"]["cupti_errors"].dump();
  auto labels = [](const runfmt::Run& run, int64_t step) {
    std::vector<std::string> out;
    for (const auto& k : run.kernels)
      if (k.step == step && k.graph_node != 0)
        out.push_back(strformat("%s | %s | %d", k.kernel.c_str(), k.op.c_str(), k.layer));
    return out;
  };
  for (int64_t step : {4, 8, 12}) {
    auto from_capture = labels(w, step), from_nodes = labels(a, step);
    ASSERT_FALSE(from_nodes.empty()) << "step " << step << " replays the decode graph";
    EXPECT_EQ(from_capture, from_nodes) << "step " << step;
  }
}

TEST(CuptiGpu, GraphsCapturedWhileDetachedGetTheLabelsNodeIdsGive) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  expect_capture_labels_match_node_labels(1);   // the engine's own GEMV kernels
  expect_capture_labels_match_node_labels(10);  // decode batch > 8: cuBLAS GEMMs in the graph
}

// Budget windows (the default schedule): the run starts in an 8-step
// window; the next opens only when the attach/detach time so far plus one
// more attach + detach fits in the budget's share of the wall time.
runfmt::Run record_budget_run(const char* name, double budget, int new_tokens) {
  HarnessOptions o;
  o.cupti_config.window_budget = budget;
  o.roofline = false;
  return record_tiny_cuda_run(name, 13, o, 2, [new_tokens](Engine& engine, const ModelConfig& cfg) {
    Request r;
    for (int t = 0; t < 5; ++t) r.prompt.push_back((17 * t + 3) % cfg.vocab_size);
    r.max_new_tokens = new_tokens;  // steps 0 .. new_tokens - 1
    r.stop_at_eos = false;
    engine.submit(std::move(r));
  });
}

TEST(CuptiGpu, TinyCuptiBudgetTracesOnlyTheFirstWindow) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  // 0.0001 % of a sub-second run buys no second attach (~10 ms on an H200).
  runfmt::Run run = record_budget_run("cupti-budget-tiny", 1e-6, 30);
  EXPECT_EQ(kernel_steps(run), (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(run.metrics["harness"]["cupti_sampled_steps"], 8);
  EXPECT_EQ(run.metrics["harness"]["cupti_skipped_steps"], 22);
  EXPECT_EQ(run.metrics["harness"]["cupti_kernel_toggles"], 1) << "one detach, at step 8";
  EXPECT_EQ(run.metrics["harness"]["cupti_schedule"], "budget 0.0001% (8-step windows)");
  EXPECT_EQ(run.manifest.json["harness"]["cupti_schedule"], "budget 0.0001% (8-step windows)");
  EXPECT_EQ(run.metrics["harness"]["cupti_dropped_records"], 0);
  EXPECT_EQ(run.metrics["harness"]["unattributed_kernels"], 0);
}

TEST(CuptiGpu, CuptiBudgetReopensWindowsWithinTheBudget) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  // A budget near 100 % reopens a window soon after the last closed (the
  // tiny model's steps take well under a millisecond, an attach ~10 ms).
  const double budget = 0.95;
  const int kSteps = 200;
  runfmt::Run run = record_budget_run("cupti-budget-high", budget, kSteps);
  const auto& h = run.metrics["harness"];
  // Windows are 8 steps long (the graphs are captured at start-up, before
  // the first): every maximal run of traced steps has 8 steps, the last one may
  // be cut by the end of the run.
  const std::set<int64_t> traced = kernel_steps(run);
  const std::vector<int64_t> steps(traced.begin(), traced.end());
  ASSERT_FALSE(steps.empty());
  std::vector<int> windows{1};
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i] == steps[i - 1] + 1) ++windows.back();
    else windows.push_back(1);
  }
  std::printf("[cupti-budget] %zu windows over %d steps, %lld toggles taking %.2f ms\n",
              windows.size(), kSteps, h["cupti_kernel_toggles"].get<long long>(),
              h["cupti_kernel_toggle_ms"].get<double>());
  EXPECT_GE(windows.size(), 2u) << "a 95 % budget reopens the window";
  EXPECT_LT(steps.size(), static_cast<size_t>(kSteps)) << "and still detaches";
  for (size_t i = 0; i + 1 < windows.size(); ++i) EXPECT_EQ(windows[i], 8) << "window " << i;
  EXPECT_LE(windows.back(), 8);
  EXPECT_EQ(steps.front(), 0);
  EXPECT_EQ(h["cupti_sampled_steps"], steps.size());
  const long long k = static_cast<long long>(windows.size());
  EXPECT_EQ(h["cupti_kernel_toggles"], 2 * (k - 1) + (steps.back() < kSteps - 1 ? 1 : 0))
      << "an attach before every window but the first, a detach after every window that ended "
         "before the run did";
  // Every attach happened when the cost so far fitted the budget: the total
  // exceeds it by at most the last attach + detach.
  const double run_ms = run.metrics["wall_s"].get<double>() * 1e3;
  EXPECT_LE(h["cupti_kernel_toggle_ms"].get<double>(), budget * run_ms + 40.0);
  size_t replayed = 0, labelled = 0;
  for (const auto& k : run.kernels) {
    replayed += k.graph_node != 0;
    labelled += k.graph_node != 0 && k.launch >= 0 && !k.op.empty();
  }
  EXPECT_GT(replayed, 0u);
  EXPECT_EQ(labelled, replayed) << "replays in later windows keep their op labels";
  EXPECT_EQ(h["unattributed_kernels"], 0);
  EXPECT_EQ(h["cupti_dropped_records"], 0);
  EXPECT_EQ(runfmt::check_trace(run.trace), std::vector<std::string>{});
}

// --profile-steps A:B: cudaProfilerStart inside step A and cudaProfilerStop
// inside step B, once each (what nsys --capture-range=cudaProfilerApi keys
// on). CUPTI's runtime-API records show the calls on the engine's timeline.
TEST(CuptiGpu, ProfileStepsCallTheProfilerApiInExactlyThoseSteps) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  HarnessOptions o;
  o.profile_first = 3;
  o.profile_last = 5;
  o.cupti_config.window_budget = 0;  // API records for every step
  o.roofline = false;
  runfmt::Run run = record_tiny_cuda_run("profile-steps", 17, o, 2, [](Engine& engine, const ModelConfig& cfg) {
    Request r;
    for (int t = 0; t < 4; ++t) r.prompt.push_back((29 * t + 5) % cfg.vocab_size);
    r.max_new_tokens = 9;
    r.stop_at_eos = false;
    engine.submit(std::move(r));
  });
  std::map<int64_t, std::pair<double, double>> step_span;  // step -> [begin, end] µs
  std::vector<double> starts, stops;
  for (const auto& e : run.trace) {
    if (e.ph == 'X' && e.cat == "step" && e.args.is_object() && e.args.contains("step"))
      step_span[e.args["step"].get<int64_t>()] = {e.ts_us, e.ts_us + e.dur_us};
    if (e.cat == "cuda_api" && e.name.rfind("cudaProfilerStart", 0) == 0) starts.push_back(e.ts_us);
    if (e.cat == "cuda_api" && e.name.rfind("cudaProfilerStop", 0) == 0) stops.push_back(e.ts_us);
  }
  ASSERT_EQ(step_span.size(), 9u);
  ASSERT_EQ(starts.size(), 1u) << "one cudaProfilerStart";
  ASSERT_EQ(stops.size(), 1u) << "one cudaProfilerStop";
  auto step_at = [&](double t) {
    for (const auto& [step, span] : step_span)
      if (t >= span.first && t <= span.second) return step;
    return int64_t{-1};
  };
  EXPECT_EQ(step_at(starts[0]), 3);
  EXPECT_EQ(step_at(stops[0]), 5);
  EXPECT_EQ(run.manifest.json["harness"]["profile_steps"], nlohmann::json::array({3, 5}));
}

}  // namespace
}  // namespace lantern::harness
