#include "harness/runfmt/run_dir.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "harness/runfmt/json_util.h"
#include "harness/runfmt/kernels_csv.h"
#include "harness/runfmt/schema.h"
#include "harness/runfmt/serialize.h"
#include "harness/runfmt/timeline_index.h"
#include "harness/runfmt/trace.h"

namespace lantern::runfmt {

using nlohmann::json;

RunWriter::RunWriter(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  LANTERN_CHECK(!ec && std::filesystem::is_directory(dir_), "cannot create run directory %s (%s)",
                dir_.c_str(), ec ? ec.message().c_str() : "not a directory");
}

void RunWriter::write_manifest(json manifest) const {
  LANTERN_ASSERT(manifest.is_object() && manifest.contains("name"), "manifest needs a name");
  manifest["format"] = "lantern-run";
  manifest["format_version"] = run_format_version();
  detail::write_json_file(dir_ / files::kManifest, manifest);
}

void RunWriter::write_metrics(json metrics) const {
  LANTERN_ASSERT(metrics.is_object(), "metrics must be an object");
  metrics["format_version"] = run_format_version();
  detail::write_json_file(dir_ / files::kMetrics, metrics);
}

void RunWriter::write_trace(const std::vector<TraceEvent>& events, json other_data) const {
  if (!other_data.is_object()) other_data = json::object();
  other_data["format_version"] = run_format_version();
  runfmt::write_trace(dir_ / files::kTrace, events, other_data);
}

void RunWriter::write_kernels(const std::vector<KernelRow>& rows) const {
  write_kernels_csv(dir_ / files::kKernels, rows);
}

void RunWriter::write_memory(const MemoryMap& memory) const {
  detail::write_json_file(dir_ / files::kMemory, memory_to_json(memory), -1);
}

void RunWriter::write_kv(const KvData& kv) const {
  detail::write_json_file(dir_ / files::kKv, kv_to_json(kv), -1);
}

void RunWriter::write_outputs(const std::vector<OutputRow>& rows) const {
  std::string text;
  for (const OutputRow& r : rows)
    text += output_to_json(r).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  detail::write_text_file(dir_ / files::kOutputs, text);
}

void RunWriter::write_timeline_index(const std::vector<TraceEvent>& events,
                                     const std::vector<KernelRow>& rows) const {
  runfmt::write_timeline_index(dir_ / files::kTimelineIndex, build_timeline_index(events, rows));
}

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  LANTERN_CHECK(in.good(), "%s: cannot open %s (%s)", path.filename().c_str(), path.c_str(),
                std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Without options.trace the trace is not parsed (it is the largest file),
// but a missing or cut-off trace.json must not pass silently: its first and
// last bytes say whether the writer finished it.
void check_trace_complete(const std::filesystem::path& path) {
  const char* name = files::kTrace;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  LANTERN_CHECK(in.good(), "%s: cannot open %s (%s)", name, path.c_str(), std::strerror(errno));
  const std::streamoff size = in.tellg();
  std::string head(1, '\0'), tail(static_cast<size_t>(std::min<std::streamoff>(size, 16)), '\0');
  in.seekg(0);
  in.read(head.data(), 1);
  in.seekg(size - static_cast<std::streamoff>(tail.size()));
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  const size_t last = tail.find_last_not_of(" \t\r\n");
  LANTERN_CHECK(size > 0 && head[0] == '{' && last != std::string::npos && last >= 1 &&
                    tail.compare(last - 1, 2, "]}") == 0,
                "%s: truncated or not a trace (%lld bytes, does not end with \"]}\"): the run was "
                "cut off while writing it",
                name, static_cast<long long>(size));
}

Run load(const std::filesystem::path& dir, const ReadOptions& options) {
  Run run;
  run.dir = dir.string();
  run.manifest = manifest_from_json(detail::read_json_file(dir / files::kManifest));

  run.metrics = detail::read_json_file(dir / files::kMetrics);
  check_format_version(detail::need_as<std::string>(run.metrics, "format_version", files::kMetrics),
                       files::kMetrics);

  if (options.trace) {
    json doc = detail::read_json_file(dir / files::kTrace);
    if (doc.is_object() && doc.contains("otherData") && doc["otherData"].contains("format_version"))
      check_format_version(
          detail::need_as<std::string>(doc["otherData"], "format_version", files::kTrace),
          files::kTrace);
    run.trace = parse_trace(doc, files::kTrace);
  } else {
    check_trace_complete(dir / files::kTrace);
  }
  run.kernels = parse_kernels_csv(read_text(dir / files::kKernels), files::kKernels);
  run.memory = memory_from_json(detail::read_json_file(dir / files::kMemory));
  run.kv = kv_from_json(detail::read_json_file(dir / files::kKv));

  std::istringstream lines(read_text(dir / files::kOutputs));
  std::string line;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    std::string where = strformat("%s line %zu", files::kOutputs, number);
    json j = parse_json_text(line, where);
    run.outputs.push_back(output_from_json(j, where));
  }
  return run;
}

}  // namespace

Run RunReader::open(const std::filesystem::path& dir, const ReadOptions& options) {
  LANTERN_CHECK(std::filesystem::is_directory(dir), "run %s: not a directory", dir.c_str());
  try {
    return load(dir, options);
  } catch (const Error& e) {
    LANTERN_FAIL("run %s: %s", dir.c_str(), e.what());
  }
}

bool RunReader::is_run_dir(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / files::kManifest);
}

}  // namespace lantern::runfmt
