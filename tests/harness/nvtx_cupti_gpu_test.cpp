// NVTX ranges really reach a tool: the test re-runs itself with
// NVTX_INJECTION64_PATH pointing at libcupti.so (it must be set before the
// first NVTX call of the process), records CUPTI's NVTX markers and compares
// names and nesting with what the NvtxObserver pushed.
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <gtest/gtest.h>

#include "harness/clock.h"
#include "harness/cupti_collector.h"
#include "harness/nvtx_observer.h"
#include "harness/timeline.h"
#include "tests/harness/seed_plan.h"
#include "tests/test_util.h"

extern char** environ;

namespace lantern::harness {
namespace {

constexpr const char* kChildEnv = "LANTERN_NVTX_CUPTI_CHILD";

std::string libcupti_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info) && info.dli_fname)
    return info.dli_fname;
  return "";
}

// Runs this test again in a child process with the NVTX injection set.
int run_child(const std::string& filter) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.push_back(std::string("NVTX_INJECTION64_PATH=") + libcupti_path());
  env.push_back(std::string(kChildEnv) + "=1");
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter_arg = "--gtest_filter=" + filter;
  char* argv[] = {self.data(), filter_arg.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(NvtxCupti, RangesReachCuptiWithNamesAndNesting) {
  LANTERN_REQUIRE_GPU();
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "instrumentation compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  if (!std::getenv(kChildEnv)) {
    ASSERT_FALSE(libcupti_path().empty()) << "cannot locate libcupti.so through dladdr";
    std::printf("[nvtx-cupti] re-running with NVTX_INJECTION64_PATH=%s\n", libcupti_path().c_str());
    EXPECT_EQ(run_child("NvtxCupti.RangesReachCuptiWithNamesAndNesting"), 0)
        << "the child process (output above) failed";
    return;
  }
  // Child: CUPTI first (marker activity), then the first NVTX call.
  Timeline timeline(clock_ns);
  CuptiOptions options;
  options.markers = true;
  options.api = false;
  CuptiCollector cupti(&timeline, options);
  cupti.start();
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  std::vector<std::pair<int, std::string>> expected;
  {
    NvtxObserver nvtx;
    auto a = testing::make_seed_arena();
    testing::run_seed_step(nvtx, *a, 5, "prefill", 2);
    // What the observer pushed, in order, with depth.
    expected.push_back({0, "step"});
    expected.push_back({1, "prefill"});
    expected.push_back({2, "embed"});
    const char* layer_ops[] = {"attn_norm", "q_proj",  "k_proj",        "v_proj",
                               "rope",      "kv_write", "attention_prefill", "o_proj",
                               "attn_residual", "mlp_norm", "gate_proj", "up_proj",
                               "swiglu",    "down_proj", "mlp_residual"};
    for (int l = 0; l < 2; ++l) {
      std::string layer = "layer ";
      layer += std::to_string(l);
      expected.push_back({2, layer});
      for (const char* op : layer_ops) expected.push_back({3, op});
    }
    for (const char* op : {"final_norm", "lm_head", "argmax"}) expected.push_back({2, op});
  }
  cupti.stop();
  GpuRecords g = cupti.take();
  EXPECT_EQ(g.dropped_records, 0u);

  std::vector<MarkerRecord> markers;
  for (const MarkerRecord& m : g.markers)
    if (m.domain == kNvtxDomain) markers.push_back(m);
  std::stable_sort(markers.begin(), markers.end(),
                   [](const MarkerRecord& a, const MarkerRecord& b) { return a.t_ns < b.t_ns; });
  std::vector<std::pair<int, std::string>> seen;
  std::vector<uint32_t> open;
  for (const MarkerRecord& m : markers) {
    if (m.start) {
      seen.push_back({static_cast<int>(open.size()), m.name});
      open.push_back(m.id);
    } else {
      ASSERT_FALSE(open.empty()) << "end marker " << m.id << " without a start";
      EXPECT_EQ(open.back(), m.id) << "ranges must close innermost first";
      open.pop_back();
    }
  }
  EXPECT_TRUE(open.empty()) << open.size() << " ranges never closed";
  std::string listing;
  for (const auto& [depth, name] : seen) listing += std::string(2 * depth, ' ') + name + "\n";
  EXPECT_EQ(seen, expected) << "CUPTI saw (" << markers.size() << " lantern markers, "
                            << g.markers.size() << " in all):\n"
                            << listing;
}

}  // namespace
}  // namespace lantern::harness
