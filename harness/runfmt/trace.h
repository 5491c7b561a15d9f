#pragma once
// trace.json: Chrome Trace Event Format (opens in Perfetto and chrome://tracing).
// Written as {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
// with every timestamp in microseconds (3 decimals: nanosecond resolution).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

// Streams the events to `path` (no intermediate JSON document).
void write_trace(const std::filesystem::path& path, const std::vector<TraceEvent>& events,
                 const nlohmann::json& other_data);

// Parses a trace document (object form or bare array form). Throws
// "trace.json: event N: ..." on a malformed event.
std::vector<TraceEvent> parse_trace(const nlohmann::json& doc,
                                    const std::string& file = "trace.json");

// Structural problems, one line each (empty when the trace is well formed):
// complete (X) events that overlap without nesting on one thread, unmatched
// B/E pairs, negative times, counters without numeric values, metadata
// events without a name.
std::vector<std::string> check_trace(const std::vector<TraceEvent>& events);

// Helpers to build metadata events that name tracks.
TraceEvent process_name_event(int pid, const std::string& name);
TraceEvent thread_name_event(int pid, int tid, const std::string& name);

}  // namespace lantern::runfmt
