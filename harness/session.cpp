#include "harness/session.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "kernels/base/errors.h"
#include "harness/alias_tracker.h"
#include "harness/attribution.h"
#include "harness/clock.h"
#include "harness/cupti_collector.h"
#include "harness/device_limits.h"
#include "harness/kv_recorder.h"
#include "harness/manifest.h"
#include "harness/memory_recorder.h"
#include "harness/metrics.h"
#include "harness/nvtx_observer.h"
#include "harness/roofline.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/schema.h"
#include "harness/timeline.h"
#include "harness/trace_builder.h"

namespace lantern::harness {

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

runfmt::OutputRow output_row(const RequestResult& r, const std::string& text,
                             const std::string& prompt_text) {
  runfmt::OutputRow o;
  o.id = r.id;
  o.tag = r.tag;
  o.prompt_text = prompt_text;
  o.prompt = r.prompt;
  o.tokens = r.tokens;
  o.text = text;
  o.finish_reason = r.finish_reason;
  o.error = r.error;
  o.submit_s = r.submit_s;
  o.first_token_s = r.first_token_s;
  o.finish_s = r.finish_s;
  o.ttft_s = r.tokens.empty() ? 0.0 : r.first_token_s - r.submit_s;
  o.tpot_s = r.tokens.size() >= 2
                 ? (r.finish_s - r.first_token_s) / static_cast<double>(r.tokens.size() - 1)
                 : 0.0;
  o.preemptions = r.preemptions;
  return o;
}

// manifest gpu.sm_limits: null when the attributes cannot be read.
nlohmann::json sm_limits_json(int device) {
  try {
    return runfmt::to_json(device_sm_limits(device));
  } catch (const Error&) {
    (void)cudaGetLastError();
    return nullptr;
  }
}

}  // namespace

Session::Session(HarnessOptions options) : options_(std::move(options)) {
  origin_ns_ = clock_ns();
  created_utc_ = utc_now();
  if (recording()) {
    LANTERN_CHECK(!runfmt::RunReader::is_run_dir(options_.record_dir),
                  "%s already holds a run (manifest.json): record into a new directory or delete "
                  "it first",
                  options_.record_dir.c_str());
    std::error_code ec;
    std::filesystem::create_directories(options_.record_dir, ec);
    LANTERN_CHECK(!ec, "cannot create run directory %s (%s)", options_.record_dir.c_str(),
                  ec.message().c_str());
    if (options_.name.empty()) {
      std::filesystem::path p = options_.record_dir;
      if (p.filename().empty()) p = p.parent_path();
      options_.name = p.filename().string();
    }
  }
  if (options_.name.empty()) options_.name = "run";
  if (!options_.enabled) return;
  if (options_.nvtx) {
    nvtx_ = std::make_unique<NvtxObserver>();
    observers_.add(nvtx_.get());
  }
  if (options_.timeline || (options_.cupti && recording())) {
    timeline_ = std::make_unique<Timeline>(clock_ns);
    observers_.add(timeline_.get());
  }
  if (options_.cupti && recording()) {
    cupti_ = std::make_unique<CuptiCollector>(timeline_.get(), options_.cupti_config);
    observers_.add(cupti_.get());  // after the timeline: it reads the current op-log index
  }
  if (options_.alias) {
    alias_ = std::make_unique<AliasTracker>();
    observers_.add(alias_.get());
  }
  if (options_.kv) {
    kv_ = std::make_unique<KvRecorder>(clock_ns);
    observers_.add(kv_.get());
  }
  if (options_.memory) {
    memory_ = std::make_unique<MemoryRecorder>(clock_ns);
    observers_.add(memory_.get());
  }
}

Session::~Session() {
  if (finished_ || !recording()) return;
  try {
    EngineSummary summary;
    summary.backend = backend_;
    write(summary, /*complete=*/false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lantern harness: could not write the unfinished run to %s: %s\n",
                 options_.record_dir.c_str(), e.what());
  }
}

Observer* Session::observer() { return options_.enabled ? &observers_ : nullptr; }

void Session::start_cupti() {
  if (!cupti_ || cupti_->active() || !cupti_error_.empty()) return;
  try {
    cupti_->start();
  } catch (const Error& e) {
    cupti_error_ = e.what();
    std::fprintf(stderr, "lantern harness: CUPTI is unavailable, kernel timings will be missing: %s\n",
                 e.what());
  }
}

Observer* Session::prepare(kernels::Backend backend) {
  backend_ = backend;
  backend_known_ = true;
  if (backend_ == kernels::Backend::cuda) start_cupti();
  return observer();
}

void Session::apply(EngineOptions& options) {
  options.observer = prepare(options.backend);
  // The GPU's clocks over the run (manifest gpu.clocks): whether it ran throttled.
  if (options.backend == kernels::Backend::cuda && recording() && options_.enabled && !clocks_) {
    std::string why;
    clocks_ = GpuClocks::open(options.gpu, &why);
    if (clocks_)
      clocks_start_ = clocks_->read();
    else
      clocks_error_ = why;
  }
  options.profile_first_step = options_.profile_first;
  options.profile_last_step = options_.profile_last;
}

void Session::set_config(nlohmann::json resolved) { config_ = std::move(resolved); }

void Session::set_command(const std::vector<std::string>& argv) { command_ = argv; }
void Session::add_manifest_section(const std::string& key, nlohmann::json value) {
  extra_manifest_[key] = std::move(value);
}
void Session::add_metrics_section(const std::string& key, nlohmann::json value) {
  extra_metrics_[key] = std::move(value);
}

void Session::on_result(const RequestResult& result, const std::string& text,
                        const std::string& prompt_text) {
  std::lock_guard<std::mutex> lock(outputs_mutex_);
  outputs_.push_back(output_row(result, text, prompt_text));
}

void Session::finish(const EngineSummary& summary) {
  LANTERN_ASSERT(!finished_, "Session::finish called twice");
  finished_ = true;  // even if writing fails: the destructor must not retry
  write(summary, /*complete=*/true);
}

// What write() gathers, step by step, before it writes the run directory.
struct Session::Collected {
  kernels::Backend backend = kernels::Backend::cpu;
  bool cuda = false;
  GpuRecords gpu;
  bool have_gpu = false;  // CUPTI collected
  nlohmann::json gpu_json = nullptr, roofline_json = nullptr;
  std::string gpu_error, roofline_error;
  Roofline roofline;
  std::vector<runfmt::KernelRow> rows;
  AttributionStats attribution;
  runfmt::MemoryMap memory_map;
  runfmt::KvData kv_data;
  std::vector<runfmt::OutputRow> outputs;
};

void Session::write(const EngineSummary& summary, bool complete) {
  Collected c;
  c.backend = backend_known_ ? backend_ : summary.backend;
  c.cuda = c.backend == kernels::Backend::cuda;
  problems_.clear();
  stop_collection(summary, c);
  if (c.cuda && recording()) describe_gpu(complete, c);
  build_kernel_rows(c);
  gather_memory_and_kv(c);
  collect_problems(c);
  nlohmann::json metrics = metrics_json(summary, c);
  if (options_.print_summary)
    for (const std::string& p : problems_) std::fprintf(stderr, "lantern harness: %s\n", p.c_str());
  if (!recording()) return;
  write_files(c, metrics, manifest_json(summary, complete, c));
}

// 1. Stop collecting.
void Session::stop_collection(const EngineSummary& summary, Collected& c) {
  if (cupti_ && cupti_->active()) {
    cupti_->stop();
    c.gpu = cupti_->take();
    c.have_gpu = true;
  }
  if (alias_) alias_->finish();
  if (kv_) {
    if (summary.kv_block_size > 0) kv_->set_block_size(summary.kv_block_size);
    if (summary.kv_blocks > 0) kv_->set_total_blocks(summary.kv_blocks);
  }
  std::lock_guard<std::mutex> lock(outputs_mutex_);
  c.outputs = outputs_;
}

// 2. The GPU and its roofline (cuda runs that record; after CUPTI stopped so
// the probes stay out of the run).
void Session::describe_gpu(bool complete, Collected& c) {
  try {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    LANTERN_CHECK(err == cudaSuccess, "cudaGetDevice failed: %s", cudaGetErrorString(err));
    c.gpu_json = gpu_info(device);
    c.gpu_json["sm_limits"] = sm_limits_json(device);
    if (clocks_)
      c.gpu_json["clocks"] = clock_delta(clocks_start_, clocks_->read()).to_json();
    else if (!clocks_error_.empty())
      c.gpu_json["clocks"] = {{"error", clocks_error_}};
  } catch (const Error& e) {
    c.gpu_error = e.what();
  }
  if (!options_.roofline || !complete) return;
  try {
    RooflineResult r = measure_roofline();
    c.roofline_json = r.to_json();
    c.roofline.copy_gb_per_s = r.copy_gb_per_s;
    c.roofline.gemm_tflop_per_s = r.gemm_tflop_per_s;
  } catch (const Error& e) {
    c.roofline_error = e.what();
    problems_.push_back(std::string("roofline probes failed: ") + e.what());
  }
}

// 3. Kernel rows: CUPTI kernels attributed to ops, or host-timed ops (cpu).
void Session::build_kernel_rows(Collected& c) {
  if (c.have_gpu && timeline_)
    c.rows = attribute_gpu_kernels(c.gpu, *timeline_, c.roofline, origin_ns_, &c.attribution);
  else if (!c.cuda && timeline_)
    c.rows = host_kernel_rows(*timeline_, c.roofline, origin_ns_);
}

// 4. Memory map, alias report, KV data.
void Session::gather_memory_and_kv(Collected& c) {
  if (memory_) memory_->fill(c.memory_map, origin_ns_);
  if (alias_) alias_->fill(c.memory_map);
  if (kv_) c.kv_data = kv_->data(origin_ns_);
}

// 5. Problems: never silent.
void Session::collect_problems(const Collected& c) {
  for (const runfmt::AliasIssue& v : c.memory_map.violations)
    problems_.push_back(strformat("alias violation (%lld occurrences): %s",
                                  static_cast<long long>(v.occurrences), v.message.c_str()));
  for (const std::string& e : c.memory_map.errors) problems_.push_back(e);
  for (const std::string& e : c.kv_data.errors) problems_.push_back("kv: " + e);
  if (timeline_)
    for (const std::string& e : timeline_->errors()) problems_.push_back("hook sequence: " + e);
  if (c.gpu.dropped_records > 0)
    problems_.push_back(strformat("CUPTI dropped %llu activity records: kernel timings are "
                                  "incomplete",
                                  static_cast<unsigned long long>(c.gpu.dropped_records)));
  for (const std::string& e : c.gpu.errors) problems_.push_back("cupti: " + e);
}

namespace {

// metrics.json harness.cupti_*: what CUPTI collected and what its schedule cost.
void add_cupti_metrics(nlohmann::json& h, const GpuRecords& gpu) {
  const GpuRecords::ToggleParts& t = gpu.toggle_parts;
  h["cupti_records"] = gpu.records;
  h["cupti_dropped_records"] = gpu.dropped_records;
  h["cupti_kernel_every"] = gpu.kernel_every;
  h["cupti_window"] = nlohmann::json::array({gpu.window_steps, gpu.window_period});
  h["cupti_schedule"] = gpu.schedule;
  h["cupti_graph_launches"] = gpu.graph_launches;
  h["cupti_sampled_steps"] = gpu.sampled_steps;
  h["cupti_skipped_steps"] = gpu.skipped_steps;
  h["cupti_kernel_toggles"] = gpu.kernel_toggles;
  h["cupti_kernel_toggle_ms"] = gpu.kernel_toggle_ns / 1e6;
  h["cupti_attach_detach"] = {{"attaches", t.attaches},          {"detaches", t.detaches},
                              {"attach_ms", t.attach_ns / 1e6},  {"sync_ms", t.sync_ns / 1e6},
                              {"flush_ms", t.flush_ns / 1e6},    {"disable_ms", t.disable_ns / 1e6},
                              {"finalize_ms", t.finalize_ns / 1e6}};
  h["cupti_errors"] = gpu.errors;
}

}  // namespace

// 6. Metrics.
nlohmann::json Session::metrics_json(const EngineSummary& summary, const Collected& c) const {
  nlohmann::json metrics = compute_metrics(c.outputs, timeline_.get());
  metrics["memory"] = {{"budget", summary.memory_budget},
                       {"peak_device_bytes", c.memory_map.peak_device_bytes},
                       {"kv_total_blocks", c.kv_data.total_blocks},
                       {"kv_peak_used_blocks", c.kv_data.peak_used_blocks},
                       {"kv_peak_step", c.kv_data.peak_step}};
  nlohmann::json h = {{"alias_violations", c.memory_map.violation_count},
                      {"alias_warnings", c.memory_map.warning_count},
                      {"kv_errors", c.kv_data.errors.size()},
                      {"kv_leaked_blocks", c.kv_data.leaked_blocks.size()},
                      {"memory_errors", c.memory_map.errors.size()},
                      {"kernels", c.rows.size()},
                      {"unattributed_kernels", c.attribution.unattributed},
                      {"kernels_labelled_by_position", c.attribution.by_position},
                      {"kernels_labelled_by_capture", c.attribution.by_capture},
                      {"ops", timeline_ ? timeline_->launches().size() : 0},
                      {"graph_replays", timeline_ ? timeline_->replays().size() : 0}};
  add_cupti_metrics(h, c.gpu);
  metrics["harness"] = std::move(h);
  metrics["steps"]["engine_steps"] = summary.steps;
  if (!summary.overlap.is_null()) metrics["steps"]["overlap"] = summary.overlap;
  for (auto& [key, value] : extra_metrics_.items()) metrics[key] = value;
  return metrics;
}

// 8. Manifest (7, the trace, is built in write_files).
nlohmann::json Session::manifest_json(const EngineSummary& summary, bool complete,
                                      const Collected& c) const {
  const bool on = options_.enabled;
  nlohmann::json harness = {
      {"enabled", on},
      {"nvtx", on && options_.nvtx},
      {"cupti", on && options_.cupti},
      {"cupti_active", c.have_gpu},
      {"cupti_error", cupti_error_},
      {"cupti_every", std::max(1, options_.cupti_config.kernel_every)},
      {"cupti_schedule", options_.cupti_config.schedule()},
      {"alias", on && options_.alias},
      {"kv", on && options_.kv},
      {"memory", on && options_.memory},
      {"timeline", timeline_ != nullptr},
      {"kernel_timing", c.have_gpu ? "cupti" : (!c.cuda && timeline_ ? "host" : "none")},
      {"profile_steps", options_.profile_first >= 0
                            ? nlohmann::json::array({options_.profile_first, options_.profile_last})
                            : nlohmann::json(nullptr)}};
  nlohmann::json manifest = {{"name", options_.name},
                             {"created_utc", created_utc_},
                             {"complete", complete},
                             {"backend", kernels::backend_name(c.backend)},
                             {"git", git_info()},
                             {"build", build_info()},
                             {"host", host_info()},
                             {"environment", lantern_environment()},
                             {"gpu", c.gpu_json},
                             {"versions", library_versions(c.cuda)},
                             {"harness", std::move(harness)},
                             {"roofline", c.roofline_json},
                             {"config", config_.is_null() ? summary.describe : config_},
                             {"command", command_}};
  if (!c.gpu_error.empty()) manifest["gpu_error"] = c.gpu_error;
  if (!c.roofline_error.empty()) manifest["roofline_error"] = c.roofline_error;
  for (auto& [key, value] : extra_manifest_.items()) manifest[key] = value;
  return manifest;
}

// 7. Trace, 9. files: the manifest last, so its presence means the rest is there.
void Session::write_files(const Collected& c, const nlohmann::json& metrics,
                          const nlohmann::json& manifest) {
  TraceSources sources;
  sources.origin_ns = origin_ns_;
  sources.timeline = timeline_.get();
  sources.gpu_kernels = c.have_gpu ? &c.rows : nullptr;
  sources.gpu = c.have_gpu ? &c.gpu : nullptr;
  sources.kv = kv_ ? &c.kv_data : nullptr;
  sources.memory = memory_ ? &memory_->samples() : nullptr;
  if (c.gpu_json.is_object()) sources.gpu_name = c.gpu_json.value("name", "");
  TraceStats trace_stats;
  std::vector<runfmt::TraceEvent> trace = build_trace(sources, &trace_stats);

  runfmt::RunWriter writer(options_.record_dir);
  writer.write_trace(trace, {{"run", options_.name},
                             {"time_unit", "us"},
                             {"trimmed_gpu_overlaps", trace_stats.trimmed_overlaps}});
  writer.write_kernels(c.rows);
  writer.write_timeline_index(trace, c.rows);
  writer.write_memory(c.memory_map);
  writer.write_kv(c.kv_data);
  writer.write_outputs(c.outputs);
  writer.write_metrics(metrics);
  writer.write_manifest(manifest);
  if (options_.print_summary)
    std::fprintf(stderr, "lantern harness: recorded run '%s' in %s (%zu problems)\n",
                 options_.name.c_str(), options_.record_dir.c_str(), problems_.size());
}

}  // namespace lantern::harness
