#include "harness/cupti_collector.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include "kernels/base/errors.h"
#include "harness/clock.h"
#include "harness/cupti_check.h"

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

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string s(out);
  std::free(out);
  return s;
}

const CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
const CUpti_ActivityKind kApiKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

// ------------------------------------------------------------------ collector
CuptiCollector::CuptiCollector(const Timeline* timeline, CuptiOptions options)
    : timeline_(timeline), options_(options) {
  LANTERN_ASSERT(timeline_ != nullptr, "CuptiCollector needs the session's timeline");
}

CuptiCollector::~CuptiCollector() {
  if (!active_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lantern harness: stopping CUPTI failed: %s\n", e.what());
  }
}

uint32_t CuptiCollector::cupti_version() {
  uint32_t v = 0;
  LANTERN_CUPTI(cuptiGetVersion(&v));
  return v;
}

void CuptiCollector::start() {
  LANTERN_ASSERT(!active_, "CUPTI collector started twice");
  LANTERN_CHECK(options_.sample_kinds == "all" || options_.sample_kinds == "kernel" ||
                    options_.sample_kinds == "kernel+memory",
                "CUPTI sample kinds must be all, kernel or kernel+memory, got '%s'",
                options_.sample_kinds.c_str());
  LANTERN_CHECK(options_.kernel_kind == "concurrent" || options_.kernel_kind == "graph" ||
                    options_.kernel_kind == "none",
                "CUPTI kernel kind must be concurrent, graph or none, got '%s'",
                options_.kernel_kind.c_str());
  LANTERN_CHECK(options_.window_period == 0 ||
                    (options_.window_steps > 0 && options_.window_steps <= options_.window_period),
                "CUPTI windows need 0 < steps <= period, got %d of %d", options_.window_steps,
                options_.window_period);
  LANTERN_CHECK(options_.window_budget <= 0 || options_.window_period > 0 ||
                    (options_.window_steps > 0 && options_.window_budget < 1),
                "CUPTI budget windows need steps > 0 and a budget below 100 %%, got %d steps, %g",
                options_.window_steps, options_.window_budget);
  LANTERN_CHECK(options_.window_period == 0 || options_.kernel_every <= 1,
                "CUPTI windows and --cupti-every sampling exclude each other");
  CuptiCollector* expected = nullptr;
  LANTERN_CHECK(g_collector.compare_exchange_strong(expected, this),
                "only one CUPTI collector can run per process");
  try {
    attach();
    last_detach_ns_ = last_attach_ns_ / 4;  // until one is measured (H200: ~2.5 of ~10 ms)
  } catch (...) {
    g_collector.store(nullptr);
    throw;
  }
  active_ = true;
  window_left_ = options_.window_steps;
}

std::string CuptiOptions::schedule() const {
  if (kernel_every > 1) return strformat("every %d", kernel_every);
  if (window_period > 0) return strformat("windows %d:%d", window_steps, window_period);
  if (window_budget > 0)
    return strformat("budget %g%% (%d-step windows)", 100.0 * window_budget, window_steps);
  return "all steps";
}

uint32_t CuptiCollector::correlation(uint32_t id) {
  const uint32_t c = id == 0 ? 0 : correlation_base_ + id;
  max_correlation_ = std::max(max_correlation_, c);
  return c;
}

void CuptiCollector::attach() {
  const uint64_t t0 = clock_ns();
  try {
    g_buffer_bytes = options_.buffer_bytes;
    // Stamp every record with the harness clock so host and GPU share one axis.
    CUptiResult r = options_.harness_clock ? cuptiActivityRegisterTimestampCallback(harness_timestamp)
                                           : CUPTI_ERROR_NOT_SUPPORTED;
    if (r != CUPTI_SUCCESS) {
      uint64_t cupti_now = 0;
      LANTERN_CUPTI(cuptiGetTimestamp(&cupti_now));
      clock_offset_ns_ = static_cast<int64_t>(clock_ns()) - static_cast<int64_t>(cupti_now);
      clock_offset_needed_ = true;
      if (options_.harness_clock) {
        std::lock_guard<std::mutex> lock(mutex_);
        records_.errors.push_back(strformat("cuptiActivityRegisterTimestampCallback failed (%s): "
                                            "CUPTI times shifted by a measured offset instead",
                                            cupti_error_string(r)));
      }
    }
    {
      // Best effort: without it CUPTI zeroes each (already zero) buffer again.
      uint8_t zeroed = 1;
      size_t bytes = sizeof zeroed;
      (void)cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &bytes, &zeroed);
    }
    LANTERN_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    if (options_.graph_node_callbacks) {
      CUpti_SubscriberHandle subscriber = nullptr;
      LANTERN_CUPTI(cuptiSubscribe(&subscriber, resource_callback, this));
      subscriber_ = subscriber;
      LANTERN_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                        CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
      LANTERN_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                        CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
    }
    {
      // Records of earlier attachments are all parsed (detach flushed them).
      std::lock_guard<std::mutex> lock(mutex_);
      correlation_base_ = max_correlation_;
    }
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
    std::lock_guard<std::mutex> lock(mutex_);
    records_.errors.push_back(strformat("unbalanced external correlation pushes at stop "
                                        "(ops %d, steps %d)",
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
    std::lock_guard<std::mutex> lock(mutex_);
    records_.errors.push_back(strformat("cudaDeviceSynchronize before the CUPTI flush failed: %s",
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
    std::lock_guard<std::mutex> lock(mutex_);
    records_.errors.push_back(strformat("cuptiFinalize failed: %s (CUPTI stays attached; later "
                                        "CUDA work in this process may run slower)",
                                        cupti_error_string(r)));
  }
  lap(toggle_parts_.finalize_ns);
  ++toggle_parts_.detaches;
  last_detach_ns_ = t - begin;
}

GpuRecords CuptiCollector::take() {
  LANTERN_ASSERT(!active_, "take() before stop()");
  std::lock_guard<std::mutex> lock(mutex_);
  GpuRecords out = std::move(records_);
  records_ = GpuRecords{};
  name_index_.clear();
  thread_index_.clear();
  kernel_name_index_.clear();
  api_name_index_.clear();
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
        std::lock_guard<std::mutex> lock(mutex_);
        records_.errors.push_back(strformat("CUPTI window at step %lld: %s; no kernel records after it",
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
uint32_t CuptiCollector::intern(const std::string& name) {
  auto [it, inserted] = name_index_.emplace(name, static_cast<uint32_t>(records_.names.size()));
  if (inserted) records_.names.push_back(name);
  return it->second;
}

uint64_t CuptiCollector::to_harness_clock(uint64_t cupti_ns) const {
  if (!clock_offset_needed_) return cupti_ns;
  return static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) + clock_offset_ns_);
}

uint32_t CuptiCollector::kernel_name(const char* mangled) {
  if (!mangled) return intern("?");
  auto it = kernel_name_index_.find(mangled);
  if (it != kernel_name_index_.end()) return it->second;
  const uint32_t index = intern(demangle(mangled));
  kernel_name_index_.emplace(mangled, index);
  return index;
}

uint32_t CuptiCollector::api_name(uint32_t kind, uint32_t cbid) {
  const uint64_t key = static_cast<uint64_t>(kind) << 32 | cbid;
  auto it = api_name_index_.find(key);
  if (it != api_name_index_.end()) return it->second;
  const char* name = nullptr;
  CUpti_CallbackDomain domain = kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                    : CUPTI_CB_DOMAIN_DRIVER_API;
  if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
  const uint32_t index = intern(name);
  api_name_index_.emplace(key, index);
  return index;
}

void CuptiCollector::handle_buffer(uint8_t* buffer, size_t valid_bytes, void* context,
                                   uint32_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  CUpti_Activity* record = nullptr;
  while (valid_bytes > 0) {
    CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (r != CUPTI_SUCCESS) {
      records_.errors.push_back(strformat("cuptiActivityGetNextRecord failed: %s",
                                          cupti_error_string(r)));
      break;
    }
    ++records_.records;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        GpuActivity a = gpu_activity(GpuActivityKind::kernel, *k);
        a.name = kernel_name(k->name);
        records_.activities.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
        ++records_.graph_launches;
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        GpuActivity a = gpu_activity(GpuActivityKind::memcpy, *m);
        a.bytes = m->bytes;
        a.copy_kind = m->copyKind;
        static const char* const kCopyNames[] = {"memcpy", "memcpy HtoD", "memcpy DtoH",
                                                 "memcpy HtoA", "memcpy AtoH", "memcpy AtoA",
                                                 "memcpy AtoD", "memcpy DtoA", "memcpy DtoD",
                                                 "memcpy HtoH", "memcpy PtoP"};
        a.name = intern(m->copyKind < sizeof kCopyNames / sizeof kCopyNames[0]
                            ? kCopyNames[m->copyKind]
                            : "memcpy");
        records_.activities.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        GpuActivity a = gpu_activity(GpuActivityKind::memset, *m);
        a.bytes = m->bytes;
        a.name = intern("memset");
        records_.activities.push_back(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        ApiCall c;
        c.start_ns = to_harness_clock(api->start);
        c.end_ns = to_harness_clock(api->end);
        c.correlation = correlation(api->correlationId);
        auto [t, added] = thread_index_.emplace(api->threadId,
                                                static_cast<uint32_t>(thread_index_.size()));
        c.thread = t->second;
        c.name = api_name(record->kind, api->cbid);
        records_.api_calls.push_back(c);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 && x->externalId > 0)
          records_.launch_of_correlation[correlation(x->correlationId)] = static_cast<int64_t>(x->externalId) - 1;
        else if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1 && x->externalId > 0)
          records_.step_of_correlation[correlation(x->correlationId)] = static_cast<int64_t>(x->externalId) - 1;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
        MarkerRecord mk;
        mk.t_ns = to_harness_clock(m->timestamp);
        mk.id = m->id;
        mk.start = (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) != 0 ||
                   (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) != 0;
        mk.name = m->name ? m->name : "";
        mk.domain = m->domain ? m->domain : "";
        records_.markers.push_back(std::move(mk));
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  CUptiResult r = cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(context), stream, &dropped);
  if (r == CUPTI_SUCCESS)
    records_.dropped_records += dropped;
  else
    records_.errors.push_back(strformat("cuptiActivityGetNumDroppedRecords failed: %s",
                                        cupti_error_string(r)));
}

void CuptiCollector::handle_graph_callback(uint32_t cbid, const void* resource_data) {
  const auto* rd = static_cast<const CUpti_ResourceData*>(resource_data);
  const auto* graph = static_cast<const CUpti_GraphData*>(rd ? rd->resourceDescriptor : nullptr);
  if (!graph) return;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t node = 0;
  CUptiResult r = cuptiGetGraphNodeId(graph->node, &node);
  if (r != CUPTI_SUCCESS) {
    records_.errors.push_back(strformat("cuptiGetGraphNodeId failed: %s", cupti_error_string(r)));
    return;
  }
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    // Node created while an op is being captured: the op owns it.
    const int64_t launch = timeline_->current_launch();
    if (launch >= 0) records_.launch_of_graph_node[node] = launch;
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    uint64_t original = 0;
    r = cuptiGetGraphNodeId(graph->originalNode, &original);
    if (r != CUPTI_SUCCESS) {
      records_.errors.push_back(strformat("cuptiGetGraphNodeId failed: %s", cupti_error_string(r)));
      return;
    }
    auto it = records_.launch_of_graph_node.find(original);
    if (it != records_.launch_of_graph_node.end()) records_.launch_of_graph_node[node] = it->second;
  }
}

}  // namespace lantern::harness
