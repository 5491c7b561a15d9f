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
  // (op, message bytes) -> durations (us); calls and time per collective op.
  std::map<std::pair<std::string, double>, std::vector<double>> by_bytes;
  std::map<std::string, std::pair<int, double>> per_op;
  for (const auto& k : run.kernels) {
    if (k.step < 0) continue;
    const bool comm = k.op == "all_reduce" || k.op == "all_gather";
    all_us += k.dur_us;
    if (k.phase == "decode") {
      decode_all_us += k.dur_us;
      decode_steps.insert(k.step);
    }
    if (!comm) continue;
    per_op[k.op].first++;
    per_op[k.op].second += k.dur_us;
    comm_us += k.dur_us;
    if (k.phase == "decode") decode_comm_us += k.dur_us;
    if (k.bytes > 0 && k.dur_us > 0) by_bytes[{k.op, k.bytes}].push_back(k.dur_us);
  }
  std::printf("\ncommunication (tensor parallel: rank %d of %d, %s communicator)\n", rank, world,
              kind.c_str());
  if (per_op.empty()) {
    std::printf("  no all_reduce records%s\n", world == 1 ? "" : " (was the kernel timing off?)");
    return;
  }
  for (const auto& [op, calls_us] : per_op)
    std::printf("  %s: %d calls, %.3f ms of %.3f ms op time in steps (%.1f%%)\n", op.c_str(),
                calls_us.first, calls_us.second / 1e3, all_us / 1e3,
                all_us > 0 ? 100.0 * calls_us.second / all_us : 0.0);
  if (!decode_steps.empty())
    std::printf(
        "  per decode step: %.3f ms of %.3f ms (%.1f%%) over %zu decode steps\n",
        decode_comm_us / 1e3 / decode_steps.size(), decode_all_us / 1e3 / decode_steps.size(),
        decode_all_us > 0 ? 100.0 * decode_comm_us / decode_all_us : 0.0, decode_steps.size());
  // nccl-tests' bus bandwidth: all_reduce 2(N-1)/N x algbw, all_gather (N-1)/N
  // (its bytes are the gathered output).
  std::printf("  %-10s %-14s %8s %12s %14s %14s\n", "op", "message bytes", "calls", "median us",
              "algbw GB/s", "busbw GB/s");
  for (const auto& [key, durs] : by_bytes) {
    const double bytes = key.second, us = median(durs), algbw = bytes / us / 1e3;
    const double factor = world <= 1 ? 0.0
                          : key.first == "all_reduce" ? 2.0 * (world - 1) / world
                                                      : double(world - 1) / world;
    std::printf("  %-10s %-14.0f %8zu %12.2f %14.2f %14.2f\n", key.first.c_str(), bytes, durs.size(),
                us, algbw, factor * algbw);
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
