#pragma once
// What the CUPTI collector hands over: GPU activities, runtime/driver API
// calls, correlation maps and NVTX markers, as plain data (no CUPTI types),
// so attribution and trace building are testable without a GPU.
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "harness/runfmt/occupancy.h"

namespace lantern::harness {

enum class GpuActivityKind : uint8_t { kernel, memcpy, memset };

struct GpuActivity {
  uint64_t start_ns = 0, end_ns = 0;  // harness clock (clock.h)
  uint64_t graph_node = 0;            // 0: not launched from a CUDA graph
  uint64_t bytes = 0;                 // memcpy / memset
  uint32_t correlation = 0;           // CUPTI correlation id of the launching API call
  uint32_t stream = 0;
  uint32_t name = 0;                  // index into GpuRecords::names
  uint32_t device = 0;
  uint32_t graph_id = 0;
  GpuActivityKind kind = GpuActivityKind::kernel;
  uint8_t copy_kind = 0;              // CUpti_ActivityMemcpyKind for memcpy
  uint16_t reserved = 0;
  runfmt::LaunchConfig launch;        // kernels: grid, block, registers, shared memory
};
static_assert(sizeof(GpuActivity) == 96);
static_assert(std::is_standard_layout_v<GpuActivity>);

struct ApiCall {
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation = 0;
  uint32_t thread = 0;  // index of the host thread (0, 1, ... in order of appearance)
  uint32_t name = 0;    // index into GpuRecords::names ("cudaLaunchKernel", ...)
  uint32_t reserved = 0;
};
static_assert(sizeof(ApiCall) == 32);

// An NVTX range edge as CUPTI saw it (CUPTI_ACTIVITY_KIND_MARKER).
struct MarkerRecord {
  uint64_t t_ns = 0;
  uint32_t id = 0;
  bool start = false;  // false: end of the range with this id
  std::string name;    // start records only
  std::string domain;
};

struct GpuRecords {
  std::vector<GpuActivity> activities;
  std::vector<ApiCall> api_calls;
  std::vector<MarkerRecord> markers;
  std::vector<std::string> names;
  // correlation id -> op-log index (external correlation, kind CUSTOM0)
  std::unordered_map<uint32_t, int64_t> launch_of_correlation;
  // correlation id -> engine step (external correlation, kind CUSTOM1)
  std::unordered_map<uint32_t, int64_t> step_of_correlation;
  // CUDA graph node id -> op-log index of the op that captured it
  std::unordered_map<uint64_t, int64_t> launch_of_graph_node;
  // CUDA device -> its SM limits, read when CUPTI started (device_limits.h);
  // with a kernel's LaunchConfig they give its occupancy.
  std::map<uint32_t, runfmt::SmLimits> sm_limits;
  uint64_t records = 0;          // activity records parsed
  uint64_t dropped_records = 0;  // reported by cuptiActivityGetNumDroppedRecords
  // Kernel-record sampling (--cupti-every N) or windows: steps with kernel
  // records, and how often / how long the kinds were switched (or CUPTI
  // attached / detached, with windows).
  int kernel_every = 1;
  int window_steps = 0, window_period = 0;  // CuptiOptions windows (0: none)
  std::string schedule;  // CuptiOptions::schedule(): "all steps", "budget 1.5% (8-step windows)", ...
  uint64_t graph_launches = 0;  // CUPTI_ACTIVITY_KIND_GRAPH_TRACE records
  uint64_t sampled_steps = 0, skipped_steps = 0;
  uint64_t kernel_toggles = 0, kernel_toggle_ns = 0;
  // Where attach / detach time goes (every attachment, the first included):
  // attach; detach = device sync + flush (CUPTI's buffers, parsed in our
  // callback) + disabling the kinds (with a second flush) + cuptiFinalize.
  struct ToggleParts {
    uint64_t attaches = 0, detaches = 0;
    uint64_t attach_ns = 0, sync_ns = 0, flush_ns = 0, disable_ns = 0, finalize_ns = 0;
  } toggle_parts;
  std::vector<std::string> errors;
};

}  // namespace lantern::harness
