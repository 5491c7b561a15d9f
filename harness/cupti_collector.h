#pragma once
// CuptiCollector: GPU activity through CUPTI's activity API.
//
// Collected: concurrent kernels (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, never
// the serialising KERNEL kind), memcpy, memset, runtime and driver API calls
// with their correlation ids, external correlation records, CUDA graph node
// ids (resource callbacks at capture and instantiation) and, on request, NVTX
// markers. CUPTI fills buffers asynchronously; they are parsed on CUPTI's
// thread in the buffer-completed callback, off the engine's hot path
// (cupti_records.h). Kernel records keep grid, block, registers and shared
// memory; with every device's SM limits, read at start (device_limits.h),
// they give each kernel's occupancy (runfmt/occupancy.h). Dropped records are
// counted (cuptiActivityGetNumDroppedRecords) and reported.
//
// Schedules (CuptiOptions): by default CUPTI is attached only for short
// windows of steps and detached (cuptiFinalize) in between, within a budget
// of wall time; it can also stay attached for the whole run, optionally
// switching kernel records on every Nth decode step only.
//
// Hot path: on_op_begin pushes the op-log index as an external correlation id
// (kind CUSTOM0) and on_op_end pops it; on_step_begin/end do the same with
// the step (kind CUSTOM1), so kernels replayed from a CUDA graph still learn
// their step. Every CUPTI call is checked; a failure throws lantern::Error
// naming the call and the CUPTI error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/observer.h"
#include "harness/gpu_records.h"
#include "harness/timeline.h"

namespace lantern::harness {

class CuptiRecordParser;

struct CuptiOptions {
  bool api = true;       // runtime API records (needed for correlation)
  bool driver_api = true;  // driver API records too
  bool markers = false;  // NVTX ranges (needs NVTX_INJECTION64_PATH=libcupti.so)
  size_t buffer_bytes = 8u << 20;
  // Sampling: decode steps are traced only when step % kernel_every == 0;
  // prefill and mixed steps always (work between steps keeps the state of the
  // step before it). Every activity
  // kind is switched off for the steps in between. 1: every step.
  int kernel_every = 1;
  // Which activity kinds the sampling switches off between sampled steps:
  // "all", "kernel" (kernels only), "kernel+memory" (kernels, memcpy, memset).
  std::string sample_kinds = "kernel";
  // How kernels are traced: "concurrent" (a record per kernel), "graph" (a
  // record per CUDA-graph launch, CUPTI_ACTIVITY_KIND_GRAPH_TRACE; eager
  // kernels untimed) or "none".
  std::string kernel_kind = "concurrent";
  // Record the engine's start-up too (weight upload, gemm.6's planning
  // launches, graph captures: tens of thousands of API records that the first
  // detach then has to parse inside the run). false: the activity kinds stay
  // off from start() to the first step; callbacks (graph-node labels) run.
  bool startup = false;
  // Label API calls with the step / op through external correlation ids
  // (push/pop around every step and eager op).
  bool external_correlation = true;
  // Subscribe to CUDA-graph node creation/cloning (labels replayed kernels
  // with the op that captured them).
  bool graph_node_callbacks = true;
  // Stamp records with the harness clock (cuptiActivityRegisterTimestampCallback);
  // false: CUPTI's clock, shifted by an offset measured at start.
  bool harness_clock = true;
  // Windows: CUPTI attached only for windows of window_steps engine steps,
  // detached (flush + cuptiFinalize) in between, which restores full speed.
  // Graphs captured while detached are labelled from the engine's per-op
  // kernel-node counts (attribution.h). When windows open:
  //  - window_period > 0: at steps with step % window_period == 0
  //    (fixed windows, --cupti-window W:P);
  //  - else window_budget > 0: the run starts in a window; the next one opens
  //    once the time spent attaching and detaching so far, plus the last
  //    measured attach + detach, fits in window_budget of the wall time since
  //    the first step (--cupti-budget PCT; the default);
  //  - else: attached for the whole run (--cupti-all-steps).
  // kernel_every > 1 keeps CUPTI attached for the whole run (sampling).
  int window_steps = 8, window_period = 0;
  double window_budget = 0.015;
  bool windows() const { return kernel_every <= 1 && (window_period > 0 || window_budget > 0); }
  // "all steps", "every N", "windows W:P" or "budget B% (W-step windows)".
  std::string schedule() const;
};

class CuptiCollector : public Observer {
 public:
  // `timeline` gives the op-log index of the op being launched; it must be
  // attached before this collector in the observer set.
  explicit CuptiCollector(const Timeline* timeline, CuptiOptions options = {});
  ~CuptiCollector() override;
  CuptiCollector(const CuptiCollector&) = delete;
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  // Enables collection. Throws lantern::Error when CUPTI refuses (no GPU,
  // another profiler such as nsys already holds CUPTI, ...). One collector
  // may be active per process.
  void start();
  // Synchronises the device, flushes every buffer and detaches CUPTI from the
  // process (cuptiFinalize: the rest of it runs at full speed).
  void stop();
  bool active() const { return active_; }

  void on_step_begin(const StepInfo& s) override;
  void on_step_end(const StepInfo& s) override;
  void on_op_begin(const OpInfo& op) override;
  void on_op_end(const OpInfo& op) override;
  // Replayed kernels are labelled by their graph node ids (capture time).
  void on_graph_replay(const GraphReplay&) override {}

  // Everything collected (call after stop()).
  GpuRecords take();

  // Called from CUPTI's C callbacks.
  void handle_buffer(uint8_t* buffer, size_t valid_bytes, void* context, uint32_t stream);
  void handle_graph_callback(uint32_t cbid, const void* resource_data);

 private:
  const Timeline* timeline_;
  CuptiOptions options_;
  bool active_ = false;
  void* subscriber_ = nullptr;
  int op_pushes_ = 0, step_pushes_ = 0;
  bool activities_on_ = false;  // the activity kinds are enabled (sampled step)
  bool startup_quiet_ = false;  // activity kinds off until the first step (options_.startup false)
  bool attached_ = false;       // CUPTI callbacks registered (between attach and detach)
  bool window_failed_ = false;  // an attach/detach between windows failed: stay detached
  int window_left_ = 0;         // steps left in the open window
  uint64_t first_step_ns_ = 0;  // harness clock at the first step (budget windows)
  uint64_t last_attach_ns_ = 0, last_detach_ns_ = 0;  // set by attach() / detach(): the next window's cost
  void attach();
  void detach();
  void use_harness_clock();
  void subscribe_graph_nodes();
  uint64_t sampled_steps_ = 0, skipped_steps_ = 0, toggles_ = 0, toggle_ns_ = 0;
  GpuRecords::ToggleParts toggle_parts_;
  void enable_activities(bool on, bool sampling);
  // Step boundaries: switch collection for step s; true when s is traced.
  bool enter_sample(const StepInfo& s);
  bool enter_window(const StepInfo& s);
  bool window_wanted(const StepInfo& s);
  template <class Switch>
  void timed_switch(Switch&& fn);  // runs fn, counted in toggles_ / toggle_ns_

  void record_sm_limits();
  void add_error(std::string message);  // into the records' errors, under mutex_

  std::mutex mutex_;  // guards parser_ (CUPTI's thread parses buffers)
  std::unique_ptr<CuptiRecordParser> parser_;
  template <class Fn>
  void with_parser(Fn&& fn);  // fn(*parser_) under mutex_
};

}  // namespace lantern::harness
