// `lantern inspect` on recorded runs, through the built binary: the summary,
// --check's verdict and --compare (an alias of `lantern compare`).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/runfmt/kernels_csv.h"
#include "harness/session.h"
#include "tests/harness/seed_plan.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::filesystem::path lantern_binary() {
  return std::filesystem::path(LANTERN_BINARY_DIR) / "bin" / "lantern";
}

// Runs `lantern ARGS` and returns (exit status, stdout + stderr).
std::pair<int, std::string> lantern(const std::string& args) {
  std::string command = lantern_binary().string() + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::filesystem::path record(const std::string& name, testing::Plan plan, int decodes) {
  auto dir = test::scratch_dir("inspect-" + name) / name;
  HarnessOptions o;
  o.record_dir = dir;
  o.print_summary = false;
  Session session(o);
  Observer& obs = *session.observer();
  auto a = testing::make_seed_arena(plan);
  obs.on_alloc(AllocEvent{"arena", "activation arena", 0x10000, a->arena.total_bytes(),
                          kernels::Backend::cpu, false});
  obs.on_arena(a->arena);
  for (int s = 0; s <= decodes; ++s)
    testing::run_seed_step(obs, *a, s, s == 0 ? "prefill" : "decode", 2);
  EngineSummary summary;
  summary.backend = kernels::Backend::cpu;
  session.finish(summary);
  return dir;
}

class InspectCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(lantern_binary()))
        << lantern_binary() << " is missing: build the `lantern` target before the tests";
  }
};

TEST_F(InspectCli, SummarisesAndChecksACleanRun) {
  auto dir = record("clean", testing::Plan::seed, 3);
  auto [status, out] = lantern("inspect " + dir.string() + " --check");
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("run clean"));
  EXPECT_THAT(out, HasSubstr("top ops by time"));
  // The table shows the top 15 of 16 ops by host time, so which single op
  // drops out depends on timing; at least six of the seven GEMM ops remain.
  EXPECT_THAT(out, HasSubstr("gemm.cpu_ref"));
  EXPECT_THAT(out, HasSubstr("alias plan: 0 violations"));
  EXPECT_THAT(out, HasSubstr("memory map"));
  EXPECT_THAT(out, HasSubstr("attn_out"));
  EXPECT_THAT(out, HasSubstr("check: OK"));
}

TEST_F(InspectCli, CheckFailsOnAPlantedAliasViolation) {
  auto dir = record("wrong", testing::Plan::up_over_gate, 1);
  auto [status, out] = lantern("inspect " + dir.string() + " --check");
  EXPECT_EQ(status, 1) << out;
  EXPECT_THAT(out, HasSubstr("VIOLATION x4"));
  EXPECT_THAT(out, HasSubstr("view 'up'"));
  EXPECT_THAT(out, HasSubstr("check: FAILED"));
}

TEST_F(InspectCli, ComparesTwoRunsOpByOp) {
  auto a = record("cmp-a", testing::Plan::seed, 1);
  auto b = record("cmp-b", testing::Plan::seed, 2);
  auto [status, out] = lantern("inspect " + a.string() + " --compare " + b.string());
  EXPECT_EQ(status, 0) << out;
  // --compare is an alias of `lantern compare` (experiment_cli_test.cpp).
  EXPECT_THAT(out, HasSubstr("kernel time per op call"));
  EXPECT_THAT(out, HasSubstr("cmp-b/cmp-a"));
  EXPECT_THAT(out, HasSubstr("down_proj"));
  EXPECT_THAT(out, Not(HasSubstr("top ops by time")));
}

TEST_F(InspectCli, SampledKernelTimingsAreSaid) {
  auto dir = record("sampled", testing::Plan::seed, 1);
  {
    auto [status, out] = lantern("inspect " + dir.string());
    EXPECT_THAT(out, Not(HasSubstr("kernel timings sampled")));
  }
  // What a CUDA run with --cupti-every 4 writes (CPU runs have no CUPTI).
  nlohmann::json m = nlohmann::json::parse(std::ifstream(dir / "metrics.json"));
  m["harness"]["cupti_kernel_every"] = 4;
  m["harness"]["cupti_schedule"] = "every 4";
  m["harness"]["cupti_sampled_steps"] = 3;
  m["harness"]["cupti_skipped_steps"] = 9;
  std::ofstream(dir / "metrics.json") << m.dump();
  auto [status, out] = lantern("inspect " + dir.string());
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("kernel timings sampled (CUPTI schedule: every 4): 3 of 12 steps traced"));
}

// CUDA runs' manifest says the GPU's clocks over the run (gpu.clocks, harness/gpu_clocks.h):
// inspect prints them, flags a throttled run and says why a run has none.
TEST_F(InspectCli, GpuClocksAreSaidAndThrottlingFlagged) {
  auto dir = record("clocks", testing::Plan::seed, 1);
  {
    auto [status, out] = lantern("inspect " + dir.string());
    EXPECT_THAT(out, Not(HasSubstr("GPU clocks")));  // a CPU run
  }
  nlohmann::json m = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  m["gpu"] = {{"name", "NVIDIA H200"},
              {"clocks", {{"seconds", 2.5}, {"sm_mhz_start", 1980}, {"sm_mhz_end", 1860}, {"sm_max_mhz", 1980},
                          {"power_cap_ms", 412.5}, {"thermal_ms", 0.0}, {"avg_power_w", 231.0},
                          {"throttled", true}, {"reasons_end", "sw_power_cap"}}}};
  std::ofstream(dir / "manifest.json") << m.dump();
  {
    auto [status, out] = lantern("inspect " + dir.string());
    EXPECT_EQ(status, 0) << out;
    EXPECT_THAT(out, HasSubstr("GPU clocks: SM 1980 -> 1860 MHz (max 1980), power cap 412.5 ms, thermal 0.0 ms "
                               "of 2500 ms  -- THROTTLED"));
  }
  m["gpu"]["clocks"] = {{"error", "libnvidia-ml.so.1 (NVML, installed with the NVIDIA driver) could not be opened"}};
  std::ofstream(dir / "manifest.json") << m.dump();
  auto [status, out] = lantern("inspect " + dir.string());
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("GPU clocks: not read (libnvidia-ml.so.1"));
}

// CUDA runs' kernels.csv carries launch configurations (CPU runs have none):
// the top table shows grid, block, registers, shared memory and occupancy.
TEST_F(InspectCli, TopTableShowsLaunchConfigAndOccupancy) {
  auto dir = record("launch", testing::Plan::seed, 1);
  std::stringstream csv;
  csv << std::ifstream(dir / "kernels.csv").rdbuf();
  auto rows = runfmt::parse_kernels_csv(csv.str());
  ASSERT_FALSE(rows.empty());
  for (runfmt::KernelRow& k : rows) {
    k.launch_config = {.grid_x = 64, .grid_y = 2, .grid_z = 1, .block_x = 256, .block_y = 1,
                       .block_z = 1, .static_smem = 2048, .dynamic_smem = 1024,
                       .regs_per_thread = 64};
    k.occupancy = runfmt::occupancy(k.launch_config, runfmt::sm90_limits());
  }
  runfmt::write_kernels_csv(dir / "kernels.csv", rows);
  auto [status, out] = lantern("inspect " + dir.string());
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("grid        block     regs   smem occupancy"));
  // 128 blocks of 8 warps, 4 per SM by registers: less than one wave on 132 SMs.
  EXPECT_THAT(out, HasSubstr("64x2        256         64   3.0K 12.1% grid"));
}

// With PDL a kernel starts while its predecessor drains: the "wall" columns
// charge each op only the time it adds past the latest end before it in its
// step, and the footnote says the steps' busy and idle time.
TEST_F(InspectCli, WallColumnsChargeOverlappedKernelsOnce) {
  auto dir = record("wall", testing::Plan::seed, 1);
  std::stringstream csv;
  csv << std::ifstream(dir / "kernels.csv").rdbuf();
  auto rows = runfmt::parse_kernels_csv(csv.str());
  ASSERT_FALSE(rows.empty());
  auto make = [&](const char* op, double start, double dur) {
    runfmt::KernelRow k = rows.front();
    k.op = op, k.step = 0, k.phase = "prefill", k.start_us = start, k.dur_us = dur, k.device = 0;
    return k;
  };
  // gemm_a 0..1000, its successor 800..1300 (300 us past a's end), then 200 us idle and
  // swiglu_c 1500..1700.
  runfmt::write_kernels_csv(dir / "kernels.csv",
                            {make("gemm_a", 0, 1000), make("attn_b", 800, 500), make("swiglu_c", 1500, 200)});
  auto [status, out] = lantern("inspect " + dir.string() + " --phase prefill");
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("total ms  share    wall ms   wall"));
  // totals 1000 / 500 / 200 us (58.8 / 29.4 / 11.8 %); wall 1000 / 300 / 200 (66.7 / 20.0 / 13.3 %)
  EXPECT_THAT(out, ::testing::ContainsRegex("attn_b +\\S+ +1 +0\\.500 +29\\.4% +0\\.300 +20\\.0%"));
  EXPECT_THAT(out, ::testing::ContainsRegex("gemm_a +\\S+ +1 +1\\.000 +58\\.8% +1\\.000 +66\\.7%"));
  EXPECT_THAT(out, ::testing::ContainsRegex("swiglu_c +\\S+ +1 +0\\.200 +11\\.8% +0\\.200 +13\\.3%"));
  EXPECT_THAT(out, HasSubstr("busy 1.500 ms, idle between kernels inside steps 0.200 ms"));
  EXPECT_THAT(out, Not(HasSubstr("idle gaps inside steps")));
  auto [gaps_status, gaps] = lantern("inspect " + dir.string() + " --phase prefill --gaps");
  EXPECT_EQ(gaps_status, 0) << gaps;
  EXPECT_THAT(gaps, HasSubstr("idle gaps inside steps (prefill): 0.200 ms in all"));
  EXPECT_THAT(gaps, ::testing::ContainsRegex("attn_b +swiglu_c +1 +0\\.200 +100\\.0% +200\\.00 +200\\.00"));
}

// Hostile-input probe (issue 15): inspect without --check used to accept a
// truncated trace.json and a header-only kernels.csv silently.
TEST_F(InspectCli, TruncatedTraceAndEmptyKernelsAreNotSilent) {
  auto dir = record("partial", testing::Plan{}, 1);
  std::ifstream in(dir / "kernels.csv");
  std::string header;
  std::getline(in, header);
  in.close();
  std::ofstream(dir / "kernels.csv", std::ios::trunc) << header << "\n";
  auto [status, out] = lantern("inspect " + dir.string());
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("warning: " + dir.string() + "/kernels.csv has no rows"));
  std::filesystem::resize_file(dir / "trace.json", std::filesystem::file_size(dir / "trace.json") / 2);
  auto [status2, out2] = lantern("inspect " + dir.string());
  EXPECT_EQ(status2, 1) << out2;
  EXPECT_THAT(out2, HasSubstr("lantern inspect: error: run " + dir.string() +
                              ": trace.json: truncated or not a trace"));
}

TEST_F(InspectCli, BadRunDirectoryIsAOneLineError) {
  auto [status, out] = lantern("inspect /nonexistent/run");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr("run /nonexistent/run: not a directory"));
}

}  // namespace
}  // namespace lantern::harness
