// CUPTI on the GPU over whole recorded engine runs on the CUDA backend: a
// clean recorded run, and which steps CUPTI traces (every Nth, windows, a
// time budget, graphs captured while detached) and which steps call the
// profiler API. The collector's attribution, roofline and manifest checks
// are in cupti_gpu_test.cpp.
#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "engine/synth.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"
#include "harness/session.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

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
