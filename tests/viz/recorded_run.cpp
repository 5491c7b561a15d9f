#include "tests/viz/recorded_run.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace lantern::test {

namespace fs = std::filesystem;

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

fs::path built_binary(const char* name) {
  return fs::path(LANTERN_BINARY_DIR) / "bin" / name;
}

namespace {

nlohmann::json experiment_of(const fs::path& model) {
  nlohmann::json prompts = nlohmann::json::array();
  for (int i = 0; i < 4; ++i) {
    std::vector<int> ids;
    for (int t = 0; t < 6 + 9 * i; ++t) ids.push_back((31 * t + 17 * i) % 5000 + 10);
    prompts.push_back({{"ids", ids}});
  }
  return {
      {"name", "viz-cpu"},
      {"description", "lantern-view tests: 4 requests, 3 slots, a 16-block KV pool"},
      {"model", {{"path", model.string()}}},
      {"device", "cpu"},
      {"limits", {{"max_seqs", 3}, {"max_context", 64}, {"kv_num_blocks", 16}}},
      {"workload",
       {{"kind", "prompts"}, {"prompts", prompts}, {"max_new_tokens", 4}, {"ignore_eos", true}}}};
}

}  // namespace

const RecordedCpuRun& recorded_cpu_run() {
  static const RecordedCpuRun run = [] {
    const fs::path root = scratch_dir("viz-recorded-cpu-run");
    RecordedCpuRun r{root / "run", root / "viz-cpu.json", root / "tiny"};
    CommandResult s = run_command(built_binary("lantern").string() + " synth --preset tiny --out " +
                                  r.model.string());
    EXPECT_EQ(s.status, 0) << s.output;
    std::ofstream(r.experiment) << experiment_of(r.model).dump(2) << "\n";
    CommandResult g = run_command(built_binary("lantern").string() + " run " +
                                  r.experiment.string() + " --out " + r.dir.string() + " --quiet");
    EXPECT_EQ(g.status, 0) << g.output;
    return r;
  }();
  return run;
}

}  // namespace lantern::test
