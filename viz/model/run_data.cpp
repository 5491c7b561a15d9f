#include "viz/model/run_data.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "kernels/base/errors.h"
#include "harness/runfmt/json_util.h"
#include "harness/runfmt/kernels_csv.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/schema.h"
#include "harness/runfmt/serialize.h"
#include "harness/runfmt/trace.h"

namespace lantern::view {

namespace fs = std::filesystem;
using runfmt::files::kKernels;
using runfmt::files::kKv;
using runfmt::files::kManifest;
using runfmt::files::kMemory;
using runfmt::files::kMetrics;
using runfmt::files::kOutputs;
using runfmt::files::kTimelineIndex;
using runfmt::files::kTrace;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  LANTERN_CHECK(in.good(), "%s: cannot open", path.filename().c_str());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Runs `load`; a lantern::Error (or any exception) becomes an error message.
template <class F>
bool guarded(RunData& run, const char* file, F&& load) {
  if (!fs::exists(run.dir / file)) {
    run.messages.push_back({LoadMessage::error, std::string(file) + ": missing (the run was cut "
                                                                    "short, or files were removed)"});
    return false;
  }
  try {
    load();
    return true;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.rfind(file, 0) != 0) what = std::string(file) + ": " + what;
    run.messages.push_back({LoadMessage::error, what});
    return false;
  }
}

void load_outputs(RunData& run) {
  std::istringstream lines(read_text(run.dir / kOutputs));
  std::string line;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    std::string where = strformat("%s line %zu", kOutputs, number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      LANTERN_FAIL("%s: invalid JSON (%s)", where.c_str(), e.what());
    }
    run.outputs.push_back(runfmt::output_from_json(j, where));
  }
}

// Fallback for runs without timeline.bin: parse the text files.
void load_timeline_from_text(RunData& run) {
  std::vector<runfmt::TraceEvent> events;
  std::vector<runfmt::KernelRow> kernels;
  guarded(run, kTrace, [&] {
    nlohmann::json doc = runfmt::detail::read_json_file(run.dir / kTrace);
    if (doc.is_object() && doc.contains("otherData") && doc["otherData"].is_object() &&
        doc["otherData"].contains("format_version"))
      runfmt::check_format_version(
          runfmt::detail::need_as<std::string>(doc["otherData"], "format_version", kTrace), kTrace);
    events = runfmt::parse_trace(doc, kTrace);
  });
  guarded(run, kKernels, [&] {
    kernels = runfmt::parse_kernels_csv(read_text(run.dir / kKernels), kKernels);
  });
  run.index = runfmt::build_timeline_index(events, kernels);
}

void load_timeline(RunData& run) {
  if (fs::exists(run.dir / kTimelineIndex)) {
    try {
      run.index = runfmt::read_timeline_index(run.dir / kTimelineIndex);
      run.index_from_side_file = true;
      return;
    } catch (const std::exception& e) {
      run.messages.push_back({LoadMessage::warning,
                              std::string(e.what()) + "; reading trace.json and kernels.csv instead"});
    }
  } else {
    run.messages.push_back(
        {LoadMessage::info, "no timeline.bin (run written by an older lantern): timeline read from "
                            "trace.json and kernels.csv, slower on big runs"});
  }
  load_timeline_from_text(run);
}

}  // namespace

std::string json_text(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* p = &j;
  for (const char* k : path) {
    if (!p->is_object()) return "-";
    auto it = p->find(k);
    if (it == p->end()) return "-";
    p = &*it;
  }
  if (p->is_null()) return "-";
  return p->is_string() ? p->get<std::string>() : p->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool RunData::has_errors() const {
  return std::any_of(messages.begin(), messages.end(),
                     [](const LoadMessage& m) { return m.level == LoadMessage::error; });
}

const std::string& RunData::str(int64_t id) const {
  static const std::string empty;
  return id >= 0 && id < static_cast<int64_t>(index.strings.size()) ? index.strings[id] : empty;
}

RunData load_run(const fs::path& dir) {
  auto start = std::chrono::steady_clock::now();
  RunData run;
  run.dir = dir;
  run.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (!fs::is_directory(dir)) {
    run.messages.push_back({LoadMessage::error, dir.string() + ": not a directory"});
    return run;
  }
  if (!fs::exists(dir / kManifest)) {
    run.messages.push_back(
        {LoadMessage::error,
         "manifest.json: missing: not a run directory, or the run was cut short before it was "
         "written (the manifest is written last)"});
  } else {
    run.has_manifest = guarded(run, kManifest, [&] {
      run.manifest = runfmt::manifest_from_json(runfmt::detail::read_json_file(dir / kManifest));
      run.name = run.manifest.name;
    });
    if (run.has_manifest && !run.manifest.complete)
      run.messages.push_back({LoadMessage::warning,
                              "incomplete run: it ended before Session::finish (complete: false); "
                              "parts may be missing or cut short"});
    if (run.has_manifest && run.manifest.format_minor < runfmt::kRunFormatMinor)
      run.messages.push_back(
          {LoadMessage::info, strformat("run format %d.%d (this viewer writes %d.%d): newer fields "
                                        "are absent",
                                        run.manifest.format_major, run.manifest.format_minor,
                                        runfmt::kRunFormatMajor, runfmt::kRunFormatMinor)});
  }
  guarded(run, kMetrics, [&] {
    nlohmann::json m = runfmt::detail::read_json_file(dir / kMetrics);
    runfmt::check_format_version(
        runfmt::detail::need_as<std::string>(m, "format_version", kMetrics), kMetrics);
    run.metrics = std::move(m);
  });
  guarded(run, kMemory, [&] {
    run.memory = runfmt::memory_from_json(runfmt::detail::read_json_file(dir / kMemory));
  });
  guarded(run, kKv, [&] { run.kv = runfmt::kv_from_json(runfmt::detail::read_json_file(dir / kKv)); });
  guarded(run, kOutputs, [&] { load_outputs(run); });
  load_timeline(run);
  // Panels index these objects: never leave them null or of another type.
  if (!run.manifest.json.is_object()) run.manifest.json = nlohmann::json::object();
  if (!run.metrics.is_object()) run.metrics = nlohmann::json::object();
  run.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::vector<fs::path> sweep_runs(const fs::path& dir) {
  std::vector<fs::path> runs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory() && runfmt::RunReader::is_run_dir(entry.path())) runs.push_back(entry.path());
  std::sort(runs.begin(), runs.end());
  return runs;
}

}  // namespace lantern::view
