#pragma once
// timeline.bin: a binary side file of a run directory holding what trace.json
// and kernels.csv hold, as named columns of 8-byte values, so that a viewer
// opens a run of a million kernels in well under a second (parsing the JSON
// takes tens of seconds). The JSON and CSV stay the reference (Perfetto,
// scripts); this file is derived from the same records and may be absent
// (older runs): readers then fall back to the text files.
// Layout and versioning: docs/run-format.md § timeline.bin.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

constexpr int kTimelineIndexMajor = 1;
constexpr int kTimelineIndexMinor = 0;

// One column: every value is 8 bytes. Strings are indices into
// TimelineIndex::strings (-1: none).
struct IndexColumn {
  enum Type : uint8_t { f64 = 0, i64 = 1, str = 2 };
  std::string name;
  Type type = f64;
  std::vector<double> f;    // type f64 (NaN: absent)
  std::vector<int64_t> i;   // types i64 and str
  size_t size() const { return type == f64 ? f.size() : i.size(); }
};

struct IndexTable {
  std::string name;
  size_t rows = 0;
  std::vector<IndexColumn> columns;
  // nullptr when the table has no such column (older or newer writers).
  const IndexColumn* find(const std::string& column) const;
};

// The whole file. Tables written by this version (columns in
// docs/run-format.md): "kernels" (kernels.csv rows), "ranges" (every complete
// event of trace.json except GPU kernels: host step/phase/layer/op ranges,
// CUDA API calls, memcpy/memset), "counters" (one row per counter value),
// "marks" (instant events), "tracks" (process/thread names).
struct TimelineIndex {
  int major = kTimelineIndexMajor, minor = kTimelineIndexMinor;
  std::vector<std::string> strings;
  std::vector<IndexTable> tables;
  const IndexTable* find(const std::string& table) const;
};

// Builds the index from the records RunWriter writes to trace.json and
// kernels.csv (the reader's fallback uses the same function on parsed files).
TimelineIndex build_timeline_index(const std::vector<TraceEvent>& events,
                                   const std::vector<KernelRow>& kernels);

void write_timeline_index(const std::filesystem::path& path, const TimelineIndex& index);
// Throws "timeline.bin: ..." on a bad magic, a truncated file, or a major
// version newer than this build reads.
TimelineIndex read_timeline_index(const std::filesystem::path& path);

}  // namespace lantern::runfmt
