#pragma once
// The records of a run directory, as plain structs: what the harness
// produces, what RunWriter serialises and what RunReader gives back (the
// viewer, the CLI and the tests all use these). No CUDA, no ImGui.
// Field-by-field documentation: docs/run-format.md.
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runfmt/occupancy.h"

namespace lantern::runfmt {

// ------------------------------------------------------------------ trace.json
// One Chrome Trace Event (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
// Times are microseconds since the run's time origin (its first recorded event).
struct TraceEvent {
  char ph = 'X';          // X complete, B/E begin/end, C counter, i instant, M metadata
  std::string name;
  std::string cat;        // "step", "phase", "layer", "op", "kernel", "memcpy", ...
  double ts_us = 0;
  double dur_us = 0;      // X only
  int pid = 0, tid = 0;
  nlohmann::json args;    // object, or null when the event has none

  bool operator==(const TraceEvent&) const = default;
};

// Track ids used in trace.json (processes and threads are named by 'M' events).
namespace track {
constexpr int kHostPid = 1;        // the engine process: step/phase/layer/op ranges
constexpr int kEngineTid = 1;      //   the engine thread
constexpr int kCudaApiTid0 = 100;  //   CUDA runtime API calls, one tid per host thread (100 + n)
constexpr int kGpuPid = 2;         // the GPU: one thread per CUDA stream (tid = stream id)
constexpr int kCounterPid = 3;     // counter tracks: KV occupancy, device memory
}  // namespace track

// ------------------------------------------------------------------ kernels.csv
// One GPU kernel (CUPTI) or, on the CPU backend, one op timed by host clocks.
// An op's bytes and FLOPs (from the kernel registry) are split over the
// kernels it launched in proportion to their durations, so per-row rates
// equal the op's rate and the column sums equal the op totals.
struct KernelRow {
  int64_t launch = -1;      // op instance id (index in the run's op log); -1 unattributed
  int64_t step = -1;
  std::string phase;        // "prefill", "decode", "mixed", "" outside steps
  int layer = -1;
  std::string op;           // "q_proj", ...; "" unattributed
  std::string family;       // kernel family ("gemm", ...); "" unattributed
  int variant = -1;         // registry variant number
  std::string variant_name; // registry variant name ("seed", ...)
  std::string kernel;       // demangled GPU kernel name, or "family.variant" (host)
  std::string source;       // "cupti" or "host"
  int device = 0;
  int stream = 0;
  double start_us = 0;      // since the run's time origin
  double dur_us = 0;
  double bytes = 0;
  double flops = 0;
  std::optional<double> gb_per_s;      // bytes / dur (1e9 bytes per second)
  std::optional<double> tflop_per_s;   // flops / dur (1e12 per second)
  std::optional<double> pct_roofline;  // roofline time / actual time * 100
  uint64_t graph_node = 0;  // CUDA graph node id (0: not launched from a graph)
  uint32_t correlation = 0; // CUPTI correlation id
  // Grid, block, registers and shared memory as CUPTI recorded the launch
  // (zero on host rows), and the theoretical occupancy they imply on the
  // recorded device (occupancy.h); nullopt when either is unknown.
  LaunchConfig launch_config;
  std::optional<Occupancy> occupancy;

  bool operator==(const KernelRow&) const = default;
};

// ------------------------------------------------------------------ memory.json
struct Allocation {
  int id = 0;
  std::string owner;        // "weights", "arena", "kv_pool", "cublas_workspace", ...
  std::string name;
  uint64_t address = 0;
  uint64_t bytes = 0;
  std::string backend;      // "cpu" or "cuda"
  double alloc_us = 0;      // since the time origin
  std::optional<double> free_us;  // absent while still allocated at the end

  bool operator==(const Allocation&) const = default;
};

struct BufferRecord {
  std::string name;
  uint64_t offset = 0;  // inside the arena allocation
  uint64_t bytes = 0;
  std::string shape;
  bool operator==(const BufferRecord&) const = default;
};

struct ViewRecord {
  int id = 0;
  std::string name;
  int buffer = -1;
  uint64_t offset = 0;  // inside its buffer
  uint64_t bytes = 0;
  bool operator==(const ViewRecord&) const = default;
};

struct OpRef {
  std::string op;
  int layer = -1;
  bool operator==(const OpRef&) const = default;
};

// A view's live interval inside one step: from a write to the last read
// before the next write (op indices into the pattern's op list).
struct LiveInterval {
  int view = -1;
  int first_write = -1;  // -1: read before any write in the step (stale)
  int last_read = -1;    // -1: written but never read in the step
  bool operator==(const LiveInterval&) const = default;
};

// The access pattern of a step: its ops in order and the live intervals they
// imply. Steps with identical op/view sequences share one pattern.
struct AccessPattern {
  int id = 0;
  std::vector<OpRef> ops;
  std::vector<LiveInterval> intervals;
  bool operator==(const AccessPattern&) const = default;
};

// A write into bytes that another live view still needs ("clobber"), or a
// read of a view that nothing wrote earlier in the step ("stale_read").
struct AliasIssue {
  std::string kind;          // "clobber" or "stale_read"
  int64_t step = -1;         // first step it happened in
  int op_index = -1;         // in the step's pattern
  OpRef op;                  // the op that wrote (clobber) or read (stale_read)
  std::string view;          // the view it wrote / read
  std::string victim;        // clobber: the live view whose bytes were overwritten
  int victim_write_index = -1;
  OpRef victim_write;        // the op that wrote the victim's live value
  int victim_read_index = -1;
  OpRef victim_read;         // the later op that still needed it
  uint64_t overlap_begin = 0, overlap_end = 0;  // arena byte offsets [begin, end)
  int64_t occurrences = 1;   // how many (step, op) instances, over the whole run
  std::string message;       // one line naming both views, the op and the step

  bool operator==(const AliasIssue&) const = default;
};

struct MemoryMap {
  std::vector<Allocation> allocations;
  uint64_t arena_address = 0;
  uint64_t arena_bytes = 0;
  std::string arena_backend;
  std::vector<BufferRecord> buffers;
  std::vector<ViewRecord> views;
  std::vector<AccessPattern> patterns;
  std::vector<std::pair<int64_t, int>> step_patterns;  // (step, pattern id)
  std::vector<AliasIssue> violations;  // kind "clobber"
  std::vector<AliasIssue> warnings;    // kind "stale_read"
  int64_t violation_count = 0;         // occurrences over the run
  int64_t warning_count = 0;
  uint64_t peak_device_bytes = 0;      // max of live cuda allocation bytes
  std::vector<std::string> errors;     // inconsistent events (overlaps, unknown frees)

  bool operator==(const MemoryMap&) const = default;
};

// ------------------------------------------------------------------ kv.json
// Naturally packed (no padding): 24 bytes per block event.
struct KvEventRecord {
  int64_t step;
  int64_t seq;
  int32_t block;
  int16_t layer;
  uint8_t kind;  // 0 alloc, 1 free
  uint8_t reserved;
  bool operator==(const KvEventRecord&) const = default;
};
static_assert(sizeof(KvEventRecord) == 24, "KvEventRecord is a packed 24-byte record");
static_assert(std::is_standard_layout_v<KvEventRecord>);

struct KvStepRecord {
  int64_t step = 0;
  double t_us = 0;                // end of the step, since the time origin
  int used_blocks = 0;
  int free_blocks = 0;
  int total_blocks = 0;
  int64_t used_token_slots = 0;   // from the engine (-1 when it did not say)
  int64_t wasted_token_slots = 0; // unused rows in partly filled last blocks (-1 unknown)
  double fragmentation = 0;       // wasted / (used + wasted) token slots
  int num_seqs = 0;
  std::vector<std::pair<int64_t, int>> blocks_per_seq;  // (sequence, blocks over all layers)

  bool operator==(const KvStepRecord&) const = default;
};

struct KvData {
  int block_size = 0;    // tokens per block (0: unknown)
  int total_blocks = 0;
  std::vector<KvEventRecord> events;
  std::vector<KvStepRecord> steps;
  int peak_used_blocks = 0;
  int64_t peak_step = -1;
  std::vector<int> leaked_blocks;     // held when the run ended
  std::vector<std::string> errors;    // double allocs, unknown frees, stat mismatches

  bool operator==(const KvData&) const = default;
};

// ------------------------------------------------------------------ outputs.jsonl
struct OutputRow {
  int64_t id = -1;
  std::string tag;
  std::string prompt_text;          // may be empty (ids only)
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  std::string error;
  double submit_s = 0, first_token_s = 0, finish_s = 0;  // engine clock
  double ttft_s = 0;                // first_token - submit
  double tpot_s = 0;                // (finish - first_token) / (tokens - 1); 0 if < 2 tokens
  int preemptions = 0;

  bool operator==(const OutputRow&) const = default;
};

// ------------------------------------------------------------------ manifest.json
struct Manifest {
  nlohmann::json json;        // the whole file
  int format_major = 0, format_minor = 0;
  std::string name;
  std::string backend;        // "cpu" / "cuda" / "" when unknown
  bool complete = true;       // false: the run ended before Session::finish
  std::optional<double> copy_gb_per_s;     // roofline probes (cuda)
  std::optional<double> gemm_tflop_per_s;
};

// A whole run directory, loaded.
struct Run {
  std::string dir;
  Manifest manifest;
  nlohmann::json metrics;
  std::vector<TraceEvent> trace;
  std::vector<KernelRow> kernels;
  MemoryMap memory;
  KvData kv;
  std::vector<OutputRow> outputs;
};

}  // namespace lantern::runfmt
