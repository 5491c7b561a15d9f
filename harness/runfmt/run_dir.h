#pragma once
// The run directory: its file names, a writer and a reader.
//
//   manifest.json  metrics.json  trace.json  kernels.csv  memory.json
//   kv.json        outputs.jsonl
//
// RunWriter writes each file from the records in records.h; RunReader loads
// them back (the viewer, `lantern inspect` and the tests read runs only
// through it). Format and fields: docs/run-format.md.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

namespace files {
constexpr const char* kManifest = "manifest.json";
constexpr const char* kMetrics = "metrics.json";
constexpr const char* kTrace = "trace.json";
constexpr const char* kKernels = "kernels.csv";
constexpr const char* kMemory = "memory.json";
constexpr const char* kKv = "kv.json";
constexpr const char* kOutputs = "outputs.jsonl";
constexpr const char* kTimelineIndex = "timeline.bin";  // binary side file (timeline_index.h)
}  // namespace files

class RunWriter {
 public:
  // Creates `dir` (and its parents) when missing.
  explicit RunWriter(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  // `manifest` gets "format": "lantern-run" and "format_version"; it must
  // hold "name".
  void write_manifest(nlohmann::json manifest) const;
  void write_metrics(nlohmann::json metrics) const;  // gets "format_version"
  void write_trace(const std::vector<TraceEvent>& events, nlohmann::json other_data) const;
  void write_kernels(const std::vector<KernelRow>& rows) const;
  void write_memory(const MemoryMap& memory) const;
  void write_kv(const KvData& kv) const;
  void write_outputs(const std::vector<OutputRow>& rows) const;
  // timeline.bin: trace events and kernel rows as binary columns, so viewers
  // open big runs fast (the JSON and CSV stay the reference).
  void write_timeline_index(const std::vector<TraceEvent>& events,
                            const std::vector<KernelRow>& rows) const;

 private:
  std::filesystem::path dir_;
};

struct ReadOptions {
  bool trace = true;  // trace.json is the largest file; skip it when not needed
};

class RunReader {
 public:
  // Loads every file. Throws lantern::Error with one line:
  //   "run DIR: FILE: problem" (missing file, invalid JSON, missing key,
  //   wrong type, or a format major newer than this build reads).
  static Run open(const std::filesystem::path& dir, const ReadOptions& options = {});
  // True when `dir` holds a manifest.json (a run directory, complete or not).
  static bool is_run_dir(const std::filesystem::path& dir);
};

}  // namespace lantern::runfmt
