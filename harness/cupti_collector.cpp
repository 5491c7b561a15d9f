#include "harness/cupti_collector.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include "kernels/base/errors.h"
#include "harness/clock.h"
#include "harness/cupti_check.h"
#include "harness/cupti_records.h"
#include "harness/device_limits.h"

namespace lantern::harness {

namespace {

std::atomic<CuptiCollector*> g_collector{nullptr};
size_t g_buffer_bytes = 8u << 20;

uint64_t CUPTIAPI harness_timestamp() { return clock_ns(); }

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = g_buffer_bytes;
  // Zeroed by calloc (fresh pages from the OS for a buffer this size), so
  // CUPTI need not zero it again on the thread that asked (possibly the engine's):
  // CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER is set at start. calloc's
  // alignment (16) covers CUPTI's 8.
  *buffer = static_cast<uint8_t*>(std::calloc(1, g_buffer_bytes));
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid_bytes) {
  if (CuptiCollector* c = g_collector.load()) c->handle_buffer(buffer, valid_bytes, context, stream);
  std::free(buffer);
}

void CUPTIAPI resource_callback(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  static_cast<CuptiCollector*>(user)->handle_graph_callback(cbid, data);
}

const CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
const CUpti_ActivityKind kApiKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

// ------------------------------------------------------------------ collector
CuptiCollector::CuptiCollector(const Timeline* timeline, CuptiOptions options)
    : timeline_(timeline), options_(options), parser_(std::make_unique<CuptiRecordParser>()) {
  LANTERN_ASSERT(timeline_ != nullptr, "CuptiCollector needs the session's timeline");
}

template <class Fn>
void CuptiCollector::with_parser(Fn&& fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  fn(*parser_);
}

CuptiCollector::~CuptiCollector() {
  if (!active_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lantern harness: stopping CUPTI failed: %s\n", e.what());
  }
}

namespace {

void check_options(const CuptiOptions& o) {
  LANTERN_CHECK(o.sample_kinds == "all" || o.sample_kinds == "kernel" ||
                    o.sample_kinds == "kernel+memory",
                "CUPTI sample kinds must be all, kernel or kernel+memory, got '%s'",
                o.sample_kinds.c_str());
  LANTERN_CHECK(o.kernel_kind == "concurrent" || o.kernel_kind == "graph" ||
                    o.kernel_kind == "none",
                "CUPTI kernel kind must be concurrent, graph or none, got '%s'",
                o.kernel_kind.c_str());
  LANTERN_CHECK(o.window_period == 0 ||
                    (o.window_steps > 0 && o.window_steps <= o.window_period),
                "CUPTI windows need 0 < steps <= period, got %d of %d", o.window_steps,
                o.window_period);
  LANTERN_CHECK(o.window_budget <= 0 || o.window_period > 0 ||
                    (o.window_steps > 0 && o.window_budget < 1),
                "CUPTI budget windows need steps > 0 and a budget below 100 %%, got %d steps, %g",
                o.window_steps, o.window_budget);
  LANTERN_CHECK(o.window_period == 0 || o.kernel_every <= 1,
                "CUPTI windows and --cupti-every sampling exclude each other");
}

}  // namespace

void CuptiCollector::start() {
  LANTERN_ASSERT(!active_, "CUPTI collector started twice");
  check_options(options_);
  CuptiCollector* expected = nullptr;
  LANTERN_CHECK(g_collector.compare_exchange_strong(expected, this),
                "only one CUPTI collector can run per process");
  try {
    attach();
    last_detach_ns_ = last_attach_ns_ / 4;  // until one is measured (H200: ~2.5 of ~10 ms)
    if (!options_.startup) {
      enable_activities(false, /*sampling=*/false);
      startup_quiet_ = true;
    }
  } catch (...) {
    g_collector.store(nullptr);
    throw;
  }
  active_ = true;
  window_left_ = options_.window_steps;
  record_sm_limits();
}

// Every device's SM limits, for the occupancy of the kernels recorded on it
// (CUPTI's deviceId is the CUDA device ordinal). A failure costs only the
// occupancy columns.
void CuptiCollector::record_sm_limits() {
  std::map<uint32_t, runfmt::SmLimits> limits;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  for (int d = 0; d < count; ++d) {
    try {
      limits[static_cast<uint32_t>(d)] = device_sm_limits(d);
    } catch (const Error& e) {
      add_error(strformat("SM limits of device %d unknown, no occupancy for its kernels: %s", d,
                          e.what()));
    }
  }
  (void)cudaGetLastError();  // a failed query must not surface in the engine's next check
  with_parser([&](CuptiRecordParser& p) { p.records().sm_limits = std::move(limits); });
}

void CuptiCollector::add_error(std::string message) {
  with_parser([&](CuptiRecordParser& p) { p.add_error(std::move(message)); });
}

std::string CuptiOptions::schedule() const {
  if (kernel_every > 1) return strformat("every %d", kernel_every);
  if (window_period > 0) return strformat("windows %d:%d", window_steps, window_period);
  if (window_budget > 0)
    return strformat("budget %g%% (%d-step windows)", 100.0 * window_budget, window_steps);
  return "all steps";
}

// Stamps every record with the harness clock so host and GPU share one axis;
// failing that, measures the offset between the two clocks.
void CuptiCollector::use_harness_clock() {
  CUptiResult r = options_.harness_clock ? cuptiActivityRegisterTimestampCallback(harness_timestamp)
                                         : CUPTI_ERROR_NOT_SUPPORTED;
  if (r == CUPTI_SUCCESS) return;
  uint64_t cupti_now = 0;
  LANTERN_CUPTI(cuptiGetTimestamp(&cupti_now));
  const int64_t offset = static_cast<int64_t>(clock_ns()) - static_cast<int64_t>(cupti_now);
  with_parser([&](CuptiRecordParser& p) { p.set_clock_offset(offset); });
  if (options_.harness_clock)
    add_error(strformat("cuptiActivityRegisterTimestampCallback failed (%s): CUPTI times shifted "
                        "by a measured offset instead",
                        cupti_error_string(r)));
}

// Graph nodes created or cloned while an op is captured belong to that op.
void CuptiCollector::subscribe_graph_nodes() {
  CUpti_SubscriberHandle subscriber = nullptr;
  LANTERN_CUPTI(cuptiSubscribe(&subscriber, resource_callback, this));
  subscriber_ = subscriber;
  LANTERN_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                    CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
  LANTERN_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                    CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
}

void CuptiCollector::attach() {
  const uint64_t t0 = clock_ns();
  try {
    g_buffer_bytes = options_.buffer_bytes;
    use_harness_clock();
    // Best effort: without it CUPTI zeroes each (already zero) buffer again.
    uint8_t zeroed = 1;
    size_t bytes = sizeof zeroed;
    (void)cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &bytes, &zeroed);
    LANTERN_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    if (options_.graph_node_callbacks) subscribe_graph_nodes();
    // Records of earlier attachments are all parsed (detach flushed them).
    with_parser([](CuptiRecordParser& p) { p.new_attachment(); });
    enable_activities(true, /*sampling=*/false);
    if (options_.markers) LANTERN_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER));
  } catch (...) {
    // Leave CUPTI as we found it; report the first failure.
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    for (CUpti_ActivityKind k : kApiKinds) cuptiActivityDisable(k);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MARKER);
    if (subscriber_) cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber_));
    subscriber_ = nullptr;
    throw;
  }
  attached_ = true;
  last_attach_ns_ = clock_ns() - t0;
  toggle_parts_.attach_ns += last_attach_ns_;
  ++toggle_parts_.attaches;
}

void CuptiCollector::stop() {
  if (!active_) return;
  active_ = false;
  if (attached_) detach();
  g_collector.store(nullptr);
  if (op_pushes_ != 0 || step_pushes_ != 0) {
    add_error(strformat("unbalanced external correlation pushes at stop (ops %d, steps %d)",
                        op_pushes_, step_pushes_));
  }
}

void CuptiCollector::detach() {
  attached_ = false;
  const uint64_t begin = clock_ns();
  uint64_t t = begin;
  auto lap = [&t](uint64_t& into) {
    const uint64_t now = clock_ns();
    into += now - t;
    t = now;
  };
  cudaError_t sync = cudaDeviceSynchronize();
  lap(toggle_parts_.sync_ns);
  if (sync != cudaSuccess) {
    add_error(strformat("cudaDeviceSynchronize before the CUPTI flush failed: %s",
                        cudaGetErrorString(sync)));
  }
  LANTERN_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  lap(toggle_parts_.flush_ns);
  // Every kind back on (sampling may have left some off), then all off.
  if (!activities_on_) enable_activities(true, /*sampling=*/true);
  enable_activities(false, /*sampling=*/false);
  if (options_.markers) LANTERN_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MARKER));
  LANTERN_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  if (subscriber_) LANTERN_CUPTI(cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber_)));
  subscriber_ = nullptr;
  lap(toggle_parts_.disable_ns);
  // Detach CUPTI from the process: with kernel tracing once enabled, CUDA
  // work stays slower after every activity kind is disabled (measured on the
  // H200, docs/harness.md § Overhead) until CUPTI is finalized. The device
  // is synchronised and every buffer flushed above, as cuptiFinalize needs.
  if (CUptiResult r = cuptiFinalize(); r != CUPTI_SUCCESS) {
    add_error(strformat("cuptiFinalize failed: %s (CUPTI stays attached; later CUDA work in "
                        "this process may run slower)",
                        cupti_error_string(r)));
  }
  lap(toggle_parts_.finalize_ns);
  ++toggle_parts_.detaches;
  last_detach_ns_ = t - begin;
}

GpuRecords CuptiCollector::take() {
  LANTERN_ASSERT(!active_, "take() before stop()");
  GpuRecords out;
  with_parser([&](CuptiRecordParser& p) { out = p.take(); });
  out.kernel_every = options_.kernel_every;
  out.window_steps = options_.window_steps;
  out.window_period = options_.window_period;
  out.schedule = options_.schedule();
  out.sampled_steps = sampled_steps_;
  out.skipped_steps = skipped_steps_;
  out.kernel_toggles = toggles_;
  out.kernel_toggle_ns = toggle_ns_;
  out.toggle_parts = toggle_parts_;
  return out;
}

// ------------------------------------------------------------------ hot path
void CuptiCollector::enable_activities(bool on, bool sampling) {
  const std::string& what = options_.sample_kinds;
  auto toggled = [&](CUpti_ActivityKind k) {
    if (!sampling || what == "all") return true;
    if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) return true;
    return what == "kernel+memory" && (k == CUPTI_ACTIVITY_KIND_MEMCPY || k == CUPTI_ACTIVITY_KIND_MEMSET);
  };
  for (CUpti_ActivityKind k : kKinds) {
    if (!toggled(k)) continue;
    if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      if (options_.kernel_kind == "none") continue;
      if (options_.kernel_kind == "graph") k = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
    }
    LANTERN_CUPTI(on ? cuptiActivityEnable(k) : cuptiActivityDisable(k));
  }
  if (options_.api && toggled(CUPTI_ACTIVITY_KIND_RUNTIME))
    LANTERN_CUPTI(on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME)
                     : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME));
  if (options_.api && options_.driver_api && toggled(CUPTI_ACTIVITY_KIND_DRIVER))
    LANTERN_CUPTI(on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER)
                     : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER));
  activities_on_ = on;
}

void CuptiCollector::on_step_begin(const StepInfo& s) {
  if (!active_) return;
  if (startup_quiet_) {  // the start-up is over: trace from the first step on
    startup_quiet_ = false;
    if (attached_ && !activities_on_) enable_activities(true, /*sampling=*/false);
  }
  const bool traced = options_.windows() ? enter_window(s) : enter_sample(s);
  ++(traced ? sampled_steps_ : skipped_steps_);
  if (!traced || !options_.external_correlation) return;
  LANTERN_CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1,
                                                       static_cast<uint64_t>(s.step) + 1));
  ++step_pushes_;
}

// Sampling: decode steps other than every Nth one run with the sampled
// activity kinds off; prefill and mixed steps are always traced.
bool CuptiCollector::enter_sample(const StepInfo& s) {
  const bool traced = options_.kernel_every <= 1 || s.step % options_.kernel_every == 0 ||
                      s.num_prefill_seqs > 0 || s.num_decode_seqs == 0;
  if (traced != activities_on_) timed_switch([&] { enable_activities(traced, /*sampling=*/true); });
  return traced;
}

// Windows: attached for window steps, detached between.
bool CuptiCollector::window_wanted(const StepInfo& s) {
  if (window_failed_) return false;
  if (options_.window_period > 0) return s.step % options_.window_period < options_.window_steps;
  if (attached_) return window_left_ > 0;
  const double elapsed = static_cast<double>(clock_ns() - first_step_ns_);
  const double cost = static_cast<double>(toggle_ns_ + last_attach_ns_ + last_detach_ns_);
  return cost <= options_.window_budget * elapsed;
}

bool CuptiCollector::enter_window(const StepInfo& s) {
  if (first_step_ns_ == 0) first_step_ns_ = clock_ns();
  bool traced = window_wanted(s);
  if (traced != attached_) {
    if (traced) window_left_ = options_.window_steps;
    timed_switch([&] {
      try {
        traced ? attach() : detach();
      } catch (const Error& e) {
        // A failed attach or detach must not fail the engine's step: stop the
        // windows, say why, and run on without CUPTI.
        window_failed_ = true;
        traced = false;
        add_error(strformat("CUPTI window at step %lld: %s; no kernel records after it",
                            static_cast<long long>(s.step), e.what()));
      }
    });
  }
  if (traced && window_left_ > 0) --window_left_;
  return traced;
}

template <class Switch>
void CuptiCollector::timed_switch(Switch&& fn) {
  const uint64_t t0 = clock_ns();
  fn();
  ++toggles_;
  toggle_ns_ += clock_ns() - t0;
}

void CuptiCollector::on_step_end(const StepInfo&) {
  if (!active_ || step_pushes_ == 0) return;
  uint64_t last = 0;
  LANTERN_CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, &last));
  --step_pushes_;
}

void CuptiCollector::on_op_begin(const OpInfo& op) {
  // Replay hooks fire after the graph launch: no API call to label.
  if (!active_ || !activities_on_ || !options_.external_correlation || op.graph == OpInfo::kReplay)
    return;
  const int64_t launch = timeline_->current_launch();
  LANTERN_CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                       static_cast<uint64_t>(launch) + 1));
  ++op_pushes_;
}

void CuptiCollector::on_op_end(const OpInfo& op) {
  if (!active_ || !activities_on_ || op.graph == OpInfo::kReplay || op_pushes_ == 0) return;
  uint64_t last = 0;
  LANTERN_CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
  --op_pushes_;
}

// ------------------------------------------------------------------ CUPTI's thread
void CuptiCollector::handle_buffer(uint8_t* buffer, size_t valid_bytes, void* context,
                                   uint32_t stream) {
  with_parser([&](CuptiRecordParser& p) {
    p.parse_buffer(buffer, valid_bytes, static_cast<CUcontext>(context), stream);
  });
}

void CuptiCollector::handle_graph_callback(uint32_t cbid, const void* resource_data) {
  // Resource callbacks run on the thread that creates the node: the engine's.
  const int64_t launch = timeline_->current_launch();
  with_parser([&](CuptiRecordParser& p) { p.graph_node_event(cbid, resource_data, launch); });
}

}  // namespace lantern::harness
