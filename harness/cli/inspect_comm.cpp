#include "harness/cli/inspect_comm.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

namespace lantern::cli {

namespace {

const nlohmann::json* tp_config(const runfmt::Run& run) {
  const nlohmann::json& m = run.manifest.json;
  if (!m.contains("config") || !m["config"].is_object()) return nullptr;
  const nlohmann::json& c = m["config"];
  if (!c.contains("tensor_parallel") || !c["tensor_parallel"].is_object()) return nullptr;
  return &c["tensor_parallel"];
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void print_communication(const runfmt::Run& run) {
  const nlohmann::json* tp = tp_config(run);
  if (!tp) return;
  const int world = tp->value("world", 1), rank = tp->value("rank", 0);
  const std::string kind = tp->value("communicator", "?");
  double comm_us = 0, all_us = 0, decode_comm_us = 0, decode_all_us = 0;
  std::set<int64_t> decode_steps;
  std::map<double, std::vector<double>> by_bytes;  // message bytes -> durations (us)
  int calls = 0;
  for (const auto& k : run.kernels) {
    if (k.step < 0) continue;
    const bool ar = k.op == "all_reduce";
    all_us += k.dur_us;
    if (k.phase == "decode") {
      decode_all_us += k.dur_us;
      decode_steps.insert(k.step);
    }
    if (!ar) continue;
    ++calls;
    comm_us += k.dur_us;
    if (k.phase == "decode") decode_comm_us += k.dur_us;
    if (k.bytes > 0 && k.dur_us > 0) by_bytes[k.bytes].push_back(k.dur_us);
  }
  std::printf("\ncommunication (tensor parallel: rank %d of %d, %s communicator)\n", rank, world,
              kind.c_str());
  if (calls == 0) {
    std::printf("  no all_reduce records%s\n", world == 1 ? "" : " (was the kernel timing off?)");
    return;
  }
  std::printf("  all_reduce: %d calls, %.3f ms of %.3f ms op time in steps (%.1f%%)\n", calls,
              comm_us / 1e3, all_us / 1e3, all_us > 0 ? 100.0 * comm_us / all_us : 0.0);
  if (!decode_steps.empty())
    std::printf(
        "  per decode step: %.3f ms of %.3f ms (%.1f%%) over %zu decode steps\n",
        decode_comm_us / 1e3 / decode_steps.size(), decode_all_us / 1e3 / decode_steps.size(),
        decode_all_us > 0 ? 100.0 * decode_comm_us / decode_all_us : 0.0, decode_steps.size());
  const double factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  std::printf("  %-14s %8s %12s %14s %14s\n", "message bytes", "calls", "median us", "algbw GB/s",
              "busbw GB/s");
  for (const auto& [bytes, durs] : by_bytes) {
    const double us = median(durs), algbw = bytes / us / 1e3;
    std::printf("  %-14.0f %8zu %12.2f %14.2f %14.2f\n", bytes, durs.size(), us, algbw,
                factor * algbw);
  }
  if (rank == 0 && world > 1) {
    int found = 0;
    for (int r = 1; r < world; ++r)
      found += std::filesystem::exists(std::filesystem::path(run.dir) /
                                       ("rank-" + std::to_string(r)) / "manifest.json");
    std::printf(
        "  ranks 1..%d: %d run director%s under %s/rank-R; all ranks: trace_ranks.json, "
        "kernels_ranks.csv\n",
        world - 1, found, found == 1 ? "y" : "ies", run.dir.c_str());
  }
}

}  // namespace lantern::cli
