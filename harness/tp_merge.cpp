#include "harness/tp_merge.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"

namespace lantern::harness {

namespace {

namespace fs = std::filesystem;

fs::path rank_dir(const fs::path& run, int rank) {
  return rank == 0 ? run : run / ("rank-" + std::to_string(rank));
}

// The rank's events with their pids moved to 10 * rank + pid and their
// process names prefixed, so Perfetto shows each rank's tracks as its own
// processes.
void add_rank_trace(const fs::path& file, int rank, nlohmann::json& events) {
  std::ifstream in(file);
  if (!in) return;
  nlohmann::json t = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!t.is_object() || !t.contains("traceEvents")) return;
  for (auto& e : t["traceEvents"]) {
    if (e.contains("pid") && e["pid"].is_number_integer())
      e["pid"] = 10 * rank + e["pid"].get<int>();
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name" && e.contains("args"))
      e["args"]["name"] = "rank " + std::to_string(rank) + ": " + e["args"].value("name", "");
    events.push_back(std::move(e));
  }
}

bool add_rank_kernels(const fs::path& file, int rank, std::ofstream& out, bool& header_written) {
  std::ifstream in(file);
  if (!in) return false;
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) {
    if (first) {
      if (!header_written) out << "rank," << line << "\n";
      header_written = true;
      continue;
    }
    out << rank << "," << line << "\n";
  }
  return true;
}

}  // namespace

std::string merge_rank_runs(const std::string& run_dir, int world) {
  const fs::path run(run_dir);
  nlohmann::json events = nlohmann::json::array();
  std::ofstream kernels(run / "kernels_ranks.csv");
  LANTERN_CHECK(kernels, "cannot write %s", (run / "kernels_ranks.csv").c_str());
  bool header = false;
  int found = 0;
  for (int r = 0; r < world; ++r) {
    const fs::path d = rank_dir(run, r);
    if (!fs::exists(d / "manifest.json")) continue;
    ++found;
    add_rank_trace(d / "trace.json", r, events);
    add_rank_kernels(d / "kernels.csv", r, kernels, header);
  }
  nlohmann::json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  std::ofstream(run / "trace_ranks.json") << trace.dump();
  return strformat(
      "merged %d of %d ranks' traces and kernel tables into %s/trace_ranks.json and "
      "kernels_ranks.csv",
      found, world, run_dir.c_str());
}

}  // namespace lantern::harness
