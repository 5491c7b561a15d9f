// The CUDA engine against the CPU reference engine on the tiny synthetic
// model: teacher-forced logits through prefill and decode, CUDA-graph decode
// against eager decode, and a batched run under KV pressure.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path dir = test::synth_tiny("engine-gpu-tiny", 99);
  return dir;
}

std::unique_ptr<Engine> make_engine(kernels::Backend b, EngineLimits lim = {}, bool graphs = true,
                                    Observer* observer = nullptr) {
  ModelConfig cfg = ModelConfig::load(tiny_model());
  EngineOptions opt;
  opt.backend = b;
  opt.limits = lim;
  opt.use_cuda_graphs = graphs;
  opt.observer = observer;
  if (b == kernels::Backend::cuda && lim.kv_num_blocks == 0) opt.limits.kv_num_blocks = 16384;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_model(), b), opt);
}



TEST(EngineGpu, LogitsMatchTheCpuReferenceThroughPrefillAndDecode) {
  LANTERN_REQUIRE_GPU();
  EngineLimits lim;
  lim.max_batch_tokens = 256;
  lim.logits_rows = 256;
  auto cpu = make_engine(kernels::Backend::cpu, lim);
  auto gpu = make_engine(kernels::Backend::cuda, lim);
  for (int prompt : {1, 17, 100}) {
    std::vector<int32_t> ids = test::random_token_ids(prompt + 40);
    auto ref = test::score_positions(*cpu, ids, prompt);
    auto got = test::score_positions(*gpu, ids, prompt);
    double worst = 0;
    int agree = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      ASSERT_EQ(got[p].size(), ref[p].size()) << p;
      worst = std::max(worst, test::rel_l2(got[p], ref[p]));
      agree += std::max_element(got[p].begin(), got[p].end()) - got[p].begin() ==
               std::max_element(ref[p].begin(), ref[p].end()) - ref[p].begin();
    }
    // bf16 activations through 2 layers: rel-L2 of a few 1e-3; 5e-2 catches
    // any real indexing or math error (those give O(1)).
    EXPECT_LT(worst, 5e-2) << "prompt " << prompt;
    EXPECT_GE(agree, static_cast<int>(ids.size() * 0.9)) << "prompt " << prompt;
    std::printf("[engine-gpu] prompt %d: worst rel-L2 %.2e, top-1 agreement %d/%zu\n", prompt, worst, agree,
                ids.size());
  }
}

TEST(EngineGpu, GraphDecodeEqualsEagerDecodeAndBatchesUnderKvPressure) {
  LANTERN_REQUIRE_GPU();
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    Request r;
    r.prompt = test::random_token_ids(1 + 9 * i);
    r.max_new_tokens = 20 + 3 * i;
    r.stop_at_eos = false;
    reqs.push_back(r);
  }
  auto run = [&](Engine& e) {
    for (const auto& r : reqs) e.submit(r);
    e.run_until_idle();
    auto res = e.take_finished();
    std::sort(res.begin(), res.end(), [](auto& a, auto& b) { return a.id < b.id; });
    return res;
  };
  auto eager = make_engine(kernels::Backend::cuda, {}, false);
  auto graphs = make_engine(kernels::Backend::cuda, {}, true);
  auto a = run(*eager), b = run(*graphs);
  ASSERT_EQ(a.size(), reqs.size());
  ASSERT_EQ(b.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;

  EngineLimits tight;
  tight.max_context = 128;
  tight.kv_num_blocks = 2 * (128 / 16) + 6;  // one full sequence and a bit: forces preemption
  auto small = make_engine(kernels::Backend::cuda, tight, true);
  auto c = run(*small);
  ASSERT_EQ(c.size(), reqs.size()) << "every request must finish";
  int preempted = 0;
  for (const auto& r : c) preempted += r.preemptions;
  EXPECT_GT(preempted, 0);
}

// StepInfo::captures_graph is true exactly for the step that captures a new
// decode graph: the first decode step of each batch size.
TEST(EngineGpu, StepsThatCaptureAGraphAreAnnounced) {
  LANTERN_REQUIRE_GPU_AND_HOOKS();
  struct Steps : Observer {
    std::vector<std::pair<std::string, bool>> steps;  // phase, captures_graph
    int replays = 0;
    void on_step_begin(const StepInfo& s) override { steps.emplace_back(s.phase, s.captures_graph); }
    void on_graph_replay(const GraphReplay&) override { ++replays; }
  } obs;
  auto engine = make_engine(kernels::Backend::cuda, {}, true, &obs);
  Request r;
  r.prompt = test::random_token_ids(5);
  r.max_new_tokens = 6;  // step 0 prefills, steps 1..5 decode one row
  r.stop_at_eos = false;
  engine->submit(r);
  engine->run_until_idle();
  ASSERT_EQ(obs.steps.size(), 6u);
  EXPECT_EQ(obs.steps[0], (std::pair<std::string, bool>{"prefill", false}));
  EXPECT_EQ(obs.steps[1], (std::pair<std::string, bool>{"decode", true}));
  for (size_t i = 2; i < obs.steps.size(); ++i)
    EXPECT_EQ(obs.steps[i], (std::pair<std::string, bool>{"decode", false})) << "step " << i;
  EXPECT_EQ(obs.replays, 5) << "every decode step replays its graph, the capturing one too";
}

}  // namespace
}  // namespace lantern
