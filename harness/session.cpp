#include "harness/session.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "engine/common.h"
#include "harness/alias_tracker.h"
#include "harness/attribution.h"
#include "harness/clock.h"
#include "harness/cupti_collector.h"
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
  options.profile_first_step = options_.profile_first;
  options.profile_last_step = options_.profile_last;
}

void Session::set_config(nlohmann::json resolved) { config_ = std::move(resolved); }

void Session::set_command(const std::vector<std::string>& argv) { command_ = argv; }

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

void Session::write(const EngineSummary& summary, bool complete) {
  const kernels::Backend backend = backend_known_ ? backend_ : summary.backend;
  const bool cuda = backend == kernels::Backend::cuda;
  problems_.clear();

  // 1. Stop collecting.
  GpuRecords gpu;
  bool have_gpu = false;
  if (cupti_ && cupti_->active()) {
    cupti_->stop();
    gpu = cupti_->take();
    have_gpu = true;
  }
  if (alias_) alias_->finish();
  if (kv_) {
    if (summary.kv_block_size > 0) kv_->set_block_size(summary.kv_block_size);
    if (summary.kv_blocks > 0) kv_->set_total_blocks(summary.kv_blocks);
  }

  // 2. Roofline (cuda runs that record; after CUPTI stopped so the probes stay out of the run).
  nlohmann::json roofline_json = nullptr, gpu_json = nullptr;
  std::string roofline_error, gpu_error;
  Roofline roofline;
  if (cuda && recording()) {
    int device = 0;
    try {
      cudaError_t err = cudaGetDevice(&device);
      LANTERN_CHECK(err == cudaSuccess, "cudaGetDevice failed: %s", cudaGetErrorString(err));
      gpu_json = gpu_info(device);
    } catch (const Error& e) {
      gpu_error = e.what();
    }
    if (options_.roofline && complete) {
      try {
        RooflineResult r = measure_roofline();
        roofline_json = r.to_json();
        roofline.copy_gb_per_s = r.copy_gb_per_s;
        roofline.gemm_tflop_per_s = r.gemm_tflop_per_s;
      } catch (const Error& e) {
        roofline_error = e.what();
        problems_.push_back(std::string("roofline probes failed: ") + e.what());
      }
    }
  }

  // 3. Kernel rows.
  std::vector<runfmt::KernelRow> rows;
  AttributionStats attribution;
  if (have_gpu && timeline_)
    rows = attribute_gpu_kernels(gpu, *timeline_, roofline, origin_ns_, &attribution);
  else if (!cuda && timeline_)
    rows = host_kernel_rows(*timeline_, roofline, origin_ns_);

  // 4. Memory map, alias report, KV data.
  runfmt::MemoryMap memory_map;
  if (memory_) memory_->fill(memory_map, origin_ns_);
  if (alias_) alias_->fill(memory_map);
  runfmt::KvData kv_data;
  if (kv_) kv_data = kv_->data(origin_ns_);

  // 5. Problems: never silent.
  for (const runfmt::AliasIssue& v : memory_map.violations)
    problems_.push_back(strformat("alias violation (%lld occurrences): %s",
                                  static_cast<long long>(v.occurrences), v.message.c_str()));
  for (const std::string& e : memory_map.errors) problems_.push_back(e);
  for (const std::string& e : kv_data.errors) problems_.push_back("kv: " + e);
  if (timeline_)
    for (const std::string& e : timeline_->errors()) problems_.push_back("hook sequence: " + e);
  if (gpu.dropped_records > 0)
    problems_.push_back(strformat("CUPTI dropped %llu activity records: kernel timings are "
                                  "incomplete",
                                  static_cast<unsigned long long>(gpu.dropped_records)));
  for (const std::string& e : gpu.errors) problems_.push_back("cupti: " + e);

  // 6. Metrics.
  std::vector<runfmt::OutputRow> outputs;
  {
    std::lock_guard<std::mutex> lock(outputs_mutex_);
    outputs = outputs_;
  }
  nlohmann::json metrics = compute_metrics(outputs, timeline_.get());
  metrics["memory"] = {{"budget", summary.memory_budget},
                       {"peak_device_bytes", memory_map.peak_device_bytes},
                       {"kv_total_blocks", kv_data.total_blocks},
                       {"kv_peak_used_blocks", kv_data.peak_used_blocks},
                       {"kv_peak_step", kv_data.peak_step}};
  metrics["harness"] = {{"alias_violations", memory_map.violation_count},
                        {"alias_warnings", memory_map.warning_count},
                        {"kv_errors", kv_data.errors.size()},
                        {"kv_leaked_blocks", kv_data.leaked_blocks.size()},
                        {"memory_errors", memory_map.errors.size()},
                        {"cupti_records", gpu.records},
                        {"cupti_dropped_records", gpu.dropped_records},
                        {"cupti_kernel_every", gpu.kernel_every},
                        {"cupti_window", nlohmann::json::array({gpu.window_steps, gpu.window_period})},
                        {"cupti_schedule", gpu.schedule},
                        {"cupti_graph_launches", gpu.graph_launches},
                        {"cupti_sampled_steps", gpu.sampled_steps},
                        {"cupti_skipped_steps", gpu.skipped_steps},
                        {"cupti_kernel_toggles", gpu.kernel_toggles},
                        {"cupti_kernel_toggle_ms", gpu.kernel_toggle_ns / 1e6},
                        {"cupti_attach_detach",
                         {{"attaches", gpu.toggle_parts.attaches},
                          {"detaches", gpu.toggle_parts.detaches},
                          {"attach_ms", gpu.toggle_parts.attach_ns / 1e6},
                          {"sync_ms", gpu.toggle_parts.sync_ns / 1e6},
                          {"flush_ms", gpu.toggle_parts.flush_ns / 1e6},
                          {"disable_ms", gpu.toggle_parts.disable_ns / 1e6},
                          {"finalize_ms", gpu.toggle_parts.finalize_ns / 1e6}}},
                        {"cupti_errors", gpu.errors},
                        {"kernels", rows.size()},
                        {"unattributed_kernels", attribution.unattributed},
                        {"kernels_labelled_by_position", attribution.by_position},
                        {"kernels_labelled_by_capture", attribution.by_capture},
                        {"ops", timeline_ ? timeline_->launches().size() : 0},
                        {"graph_replays", timeline_ ? timeline_->replays().size() : 0}};
  metrics["steps"]["engine_steps"] = summary.steps;

  if (options_.print_summary)
    for (const std::string& p : problems_) std::fprintf(stderr, "lantern harness: %s\n", p.c_str());
  if (!recording()) return;

  // 7. Trace.
  TraceSources sources;
  sources.origin_ns = origin_ns_;
  sources.timeline = timeline_.get();
  sources.gpu_kernels = have_gpu ? &rows : nullptr;
  sources.gpu = have_gpu ? &gpu : nullptr;
  sources.kv = kv_ ? &kv_data : nullptr;
  sources.memory = memory_ ? &memory_->samples() : nullptr;
  if (gpu_json.is_object()) sources.gpu_name = gpu_json.value("name", "");
  TraceStats trace_stats;
  std::vector<runfmt::TraceEvent> trace = build_trace(sources, &trace_stats);

  // 8. Manifest.
  nlohmann::json manifest = {
      {"name", options_.name},
      {"created_utc", created_utc_},
      {"complete", complete},
      {"backend", kernels::backend_name(backend)},
      {"git", git_info()},
      {"build", build_info()},
      {"host", host_info()},
      {"gpu", gpu_json},
      {"versions", library_versions(cuda)},
      {"harness",
       {{"enabled", options_.enabled},
        {"nvtx", options_.enabled && options_.nvtx},
        {"cupti", options_.enabled && options_.cupti},
        {"cupti_active", have_gpu},
        {"cupti_error", cupti_error_},
        {"cupti_every", std::max(1, options_.cupti_config.kernel_every)},
        {"cupti_schedule", options_.cupti_config.schedule()},
        {"alias", options_.enabled && options_.alias},
        {"kv", options_.enabled && options_.kv},
        {"memory", options_.enabled && options_.memory},
        {"timeline", timeline_ != nullptr},
        {"kernel_timing", have_gpu ? "cupti" : (!cuda && timeline_ ? "host" : "none")},
        {"profile_steps", options_.profile_first >= 0
                              ? nlohmann::json::array({options_.profile_first, options_.profile_last})
                              : nlohmann::json(nullptr)}}},
      {"roofline", roofline_json},
      {"config", config_.is_null() ? summary.describe : config_},
      {"command", command_}};
  if (!gpu_error.empty()) manifest["gpu_error"] = gpu_error;
  if (!roofline_error.empty()) manifest["roofline_error"] = roofline_error;

  // 9. Files.
  runfmt::RunWriter writer(options_.record_dir);
  writer.write_trace(trace, {{"run", options_.name},
                             {"time_unit", "us"},
                             {"trimmed_gpu_overlaps", trace_stats.trimmed_overlaps}});
  writer.write_kernels(rows);
  writer.write_timeline_index(trace, rows);
  writer.write_memory(memory_map);
  writer.write_kv(kv_data);
  writer.write_outputs(outputs);
  writer.write_metrics(metrics);
  writer.write_manifest(manifest);  // last: a manifest means every other file is there
  if (options_.print_summary)
    std::fprintf(stderr, "lantern harness: recorded run '%s' in %s (%zu problems)\n",
                 options_.name.c_str(), options_.record_dir.c_str(), problems_.size());
}

}  // namespace lantern::harness
