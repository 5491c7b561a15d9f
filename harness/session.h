#pragma once
// Session: the harness for one run. It builds the observers the options ask
// for, hands the engine one Observer, and at the end writes the run
// directory (manifest.json, metrics.json, trace.json, kernels.csv,
// memory.json, kv.json, outputs.jsonl; docs/run-format.md).
//
//   harness::Session session(cli::parse_harness_options(args));
//   EngineOptions eo; ...; session.apply(eo);     // before the Engine exists
//   Engine engine(cfg, std::move(weights), eo);   // (or: eo.observer = session.prepare(backend))
//   session.set_config(engine.describe());        // + request settings
//   ... engine.run_until_idle();
//   for (auto& r : engine.take_finished()) session.on_result(r, text_of(r));
//   session.finish(engine);                       // writes RUN_DIR
//
// Observers, in hook order: NVTX ranges, timeline (host clocks), CUPTI
// (cuda runs that record), alias tracker, KV recorder, memory map. With
// `enabled` false no observer is attached at all (observer() is null).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "harness/cupti_collector.h"
#include "harness/gpu_clocks.h"
#include "harness/observer_set.h"
#include "harness/runfmt/records.h"

namespace lantern::harness {

struct HarnessOptions {
  std::filesystem::path record_dir;  // run directory to write; empty: write nothing
  std::string name;                  // run name; default: record_dir's last component
  bool enabled = true;   // false (--harness off): no observer attached at all
  bool nvtx = true;      // NVTX ranges (free unless a tool such as nsys is attached)
  bool cupti = true;     // CUPTI kernel timings (cuda runs that record only)
  bool alias = true;     // alias-lifetime tracker
  bool kv = true;        // KV block recorder
  bool memory = true;    // memory map
  bool timeline = true;  // host-clock step/layer/op ranges (kernel timings on the cpu
                         // backend; CUPTI attribution needs it and turns it on)
  bool roofline = true;  // roofline probes for cuda runs that record
  // When and how CUPTI collects: budget windows by default (window_budget,
  // --cupti-budget; 0 with --cupti-all-steps), kernel_every (--cupti-every),
  // window_steps / window_period (--cupti-window), and the overhead-study knobs
  // (bench_harness_overhead's MODE/part variants; docs/harness.md § Overhead).
  CuptiOptions cupti_config;
  int profile_first = -1, profile_last = -1;  // --profile-steps A:B (nsys capture range)
  bool print_summary = true;  // finish() prints problems and where the run went to stderr
};

// What finish() needs from the engine; finish(const Engine&) fills it.
struct EngineSummary {
  kernels::Backend backend = kernels::Backend::cpu;
  nlohmann::json memory_budget;  // MemoryBudget::to_json()
  int kv_blocks = 0;
  int kv_block_size = 0;
  int64_t steps = 0;
  nlohmann::json describe;       // Engine::describe(): used when set_config was not called
  // Overlapped decode (Engine::overlap_stats): {mode, continuations,
  // discarded_rows} into metrics.json's steps.overlap; null: not reported.
  nlohmann::json overlap;
};

class NvtxObserver;
class Timeline;
class AliasTracker;
class KvRecorder;
class MemoryRecorder;

class Session {
 public:
  // Throws lantern::Error when record_dir already holds a run.
  explicit Session(HarnessOptions options);
  ~Session();  // a session that never finished writes what it has (manifest "complete": false)
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The observer to give the engine: null when the harness is off.
  Observer* observer();
  // Call before the engine exists: records the backend and, for a cuda run
  // that records, starts CUPTI (if CUPTI cannot start -- e.g. nsys holds it --
  // the run goes on without kernel timings and the manifest says why).
  // Returns observer().
  Observer* prepare(kernels::Backend backend);
  // prepare(options.backend), then sets options.observer and the profile
  // steps (options().profile_first / profile_last).
  void apply(EngineOptions& options);
  // The resolved configuration recorded in the manifest (engine.describe()
  // plus the request settings).
  void set_config(nlohmann::json resolved);
  // The command line, recorded in the manifest.
  void set_command(const std::vector<std::string>& argv);
  // Extra top-level sections of manifest.json / metrics.json (`lantern run`:
  // the experiment, content hashes, serving metrics per repetition).
  void add_manifest_section(const std::string& key, nlohmann::json value);
  void add_metrics_section(const std::string& key, nlohmann::json value);
  // One finished request and its detokenised text. Thread-safe.
  void on_result(const RequestResult& result, const std::string& text,
                 const std::string& prompt_text = "");
  // Stops collection, runs the roofline probes (cuda), checks everything and
  // writes the run directory. Call once, with the engine idle.
  void finish(const Engine& engine);
  void finish(const EngineSummary& summary);

  bool recording() const { return !options_.record_dir.empty(); }
  bool finished() const { return finished_; }
  const std::filesystem::path& run_dir() const { return options_.record_dir; }
  const HarnessOptions& options() const { return options_; }
  // Problems found by the checks (alias violations, KV and memory-map errors,
  // dropped CUPTI records): filled by finish().
  const std::vector<std::string>& problems() const { return problems_; }

  // The parts (null when disabled), for tests and benchmarks.
  const AliasTracker* alias() const { return alias_.get(); }
  const KvRecorder* kv() const { return kv_.get(); }
  const MemoryRecorder* memory() const { return memory_.get(); }
  const Timeline* timeline() const { return timeline_.get(); }

 private:
  HarnessOptions options_;
  uint64_t origin_ns_ = 0;
  std::string created_utc_;
  ObserverSet observers_;
  std::unique_ptr<NvtxObserver> nvtx_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<CuptiCollector> cupti_;
  std::unique_ptr<AliasTracker> alias_;
  std::unique_ptr<KvRecorder> kv_;
  std::unique_ptr<MemoryRecorder> memory_;
  std::unique_ptr<GpuClocks> clocks_;  // CUDA runs that record: NVML, read at the start and at write()
  GpuClockReading clocks_start_;
  kernels::Backend backend_ = kernels::Backend::cpu;
  bool backend_known_ = false;
  std::string cupti_error_;
  std::string clocks_error_;  // why clocks_ is null on a CUDA run that records
  nlohmann::json config_;
  nlohmann::json command_;
  nlohmann::json extra_manifest_ = nlohmann::json::object();
  nlohmann::json extra_metrics_ = nlohmann::json::object();
  std::mutex outputs_mutex_;
  std::vector<runfmt::OutputRow> outputs_;
  std::vector<std::string> problems_;
  bool finished_ = false;

  void start_cupti();
  // write(): the numbered steps of recording a run (session.cpp).
  struct Collected;
  void write(const EngineSummary& summary, bool complete);
  void stop_collection(const EngineSummary& summary, Collected& c);
  void describe_gpu(bool complete, Collected& c);
  void build_kernel_rows(Collected& c);
  void gather_memory_and_kv(Collected& c);
  void collect_problems(const Collected& c);
  nlohmann::json metrics_json(const EngineSummary& summary, const Collected& c) const;
  nlohmann::json manifest_json(const EngineSummary& summary, bool complete, const Collected& c) const;
  void write_files(const Collected& c, const nlohmann::json& metrics, const nlohmann::json& manifest);
};

}  // namespace lantern::harness
