#pragma once
// One opened run directory, as the viewer holds it. Each file is loaded on its
// own: a missing, corrupt or too-new file becomes a message (shown in the app)
// and an empty part, never an exception, so a damaged run still opens with
// whatever is readable. The timeline and kernel rows come from timeline.bin
// when present (fast), else from trace.json + kernels.csv.
#include <filesystem>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"
#include "harness/runfmt/timeline_index.h"

namespace lantern::view {

struct LoadMessage {
  enum Level { info, warning, error } level = info;
  std::string text;  // one line: "kv.json: missing key 'events'"
};

struct RunData {
  std::filesystem::path dir;
  std::string name;               // manifest name, else the directory's name
  bool has_manifest = false;      // false: not a run, or cut before the manifest was written
  runfmt::Manifest manifest;
  nlohmann::json metrics;         // null when unreadable
  runfmt::MemoryMap memory;
  runfmt::KvData kv;
  std::vector<runfmt::OutputRow> outputs;
  runfmt::TimelineIndex index;    // kernels, ranges, counters, marks, tracks
  bool index_from_side_file = false;
  std::vector<LoadMessage> messages;
  double load_seconds = 0;

  bool has_errors() const;
  const std::string& str(int64_t id) const;  // index string (empty for -1)
};

// The string or number at a path of `j` as text ("-" when absent or null);
// never throws, whatever the types met on the way.
std::string json_text(const nlohmann::json& j, std::initializer_list<const char*> path);

// Never throws on bad input: every problem is a message in the result.
RunData load_run(const std::filesystem::path& dir);

// Sub-directories of `dir` that hold a manifest.json (a sweep), sorted by name.
std::vector<std::filesystem::path> sweep_runs(const std::filesystem::path& dir);

}  // namespace lantern::view
