#pragma once
// Timeline: the host-side record of a run. Every step, layer and op range
// with host clock times, and the op log (one entry per on_op_begin: its
// kernel entry and the bytes/FLOPs it declared). CUPTI kernel records are
// attributed to op-log entries; on the CPU backend the op ranges themselves
// are the kernel timings.
//
// Hot path: a clock read and a push_back per hook; names are kept as the
// engine's `const char*` (stable string literals) and interned at the end.
// CUDA graphs: ops recorded while a graph is captured (at the engine's
// start-up) are logged with mode kCapture (their index labels the graph nodes
// they create); on_graph_captured then names their graph (a CaptureRecord)
// and gives them their kernel-node counts. A replay of a graph is one
// ReplayRecord (on_graph_replay), not one entry per op. Ops hooked one by one
// with kReplay (observers driven by hand) are logged without host timing.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/observer.h"

namespace lantern::harness {

struct StepRecord {
  uint64_t begin_ns = 0, end_ns = 0;
  int64_t step = 0;
  const char* phase = "";
  int32_t prefill_seqs = 0, decode_seqs = 0, tokens = 0;
  uint32_t first_launch = 0, end_launch = 0;  // op-log range [first, end)
  int32_t reserved = 0;
  // When its tokens were collected (Observer::on_step_collected), 0 if never.
  // An overlapped step's range [begin, end) covers only its planning and
  // launches; the step occupies the run from the previous step's collection
  // to its own (step_share_ns).
  uint64_t collected_ns = 0;
};
static_assert(sizeof(StepRecord) == 64);

// The time a step occupied the run: from its begin (or the previous step's
// collection, if later) to its collection; end - begin for a step never
// collected. `prev_collected_ns`: the collection time of the step before it (0
// for the first).
uint64_t step_share_ns(const StepRecord& s, uint64_t prev_collected_ns);

struct LayerRecord {
  uint64_t begin_ns = 0, end_ns = 0;
  int64_t step = -1;
  int32_t layer = -1;
  int32_t replay = 0;  // 1: its ops were CUDA-graph replays (accounting only, no host work)
};
static_assert(sizeof(LayerRecord) == 32);

struct OpLaunch {
  uint64_t begin_ns = 0, end_ns = 0;  // host time around the op (launch time on cuda)
  const char* op = "";
  const kernels::KernelEntry* kernel = nullptr;
  double bytes = 0, flops = 0;
  int64_t step = -1;                  // -1 outside steps
  int32_t step_index = -1;            // index into steps(), -1 outside steps
  int16_t layer = -1;
  uint8_t graph = OpInfo::kEager;     // OpInfo::GraphMode: eager, capture or replay
  int8_t graph_kernels = -1;          // kCapture: OpInfo::graph_kernels told at capture (-1: unknown)
};
static_assert(sizeof(OpLaunch) == 64);
static_assert(std::is_standard_layout_v<OpLaunch>);

// One CUDA-graph replay: the graph's ops are not logged again (they were
// logged once at capture, where the CUPTI graph-node ids point).
struct ReplayRecord {
  uint64_t t_ns = 0;       // host time of the replay hook (just after the launch)
  int64_t step = -1;
  int32_t step_index = -1;
  int32_t graph = -1;      // GraphReplay::graph
  int32_t num_ops = 0;
  int32_t reserved = 0;
};
static_assert(sizeof(ReplayRecord) == 32);

// An op of a replay that declared another cost than its capture did
// (attention_decode: the engine recomputes its cost from each step's context
// lengths before the replay hook, Model::refresh_decode_costs): the op-log
// entry of the captured op, the replay's step, and the replay's cost.
struct ReplayCost {
  int64_t step = -1;
  uint32_t launch = 0;
  double bytes = 0, flops = 0;
};

// One captured CUDA graph: its ops are the op-log entries [first_launch,
// first_launch + num_ops), all kCapture.
struct CaptureRecord {
  int32_t graph = -1;  // GraphReplay::graph
  int32_t num_ops = 0;
  uint32_t first_launch = 0;
};

class Timeline : public Observer {
 public:
  explicit Timeline(uint64_t (*clock)());

  void on_step_begin(const StepInfo& s) override;
  void on_step_end(const StepInfo& s) override;
  void on_layer_begin(int layer) override;
  void on_layer_end(int layer) override;
  void on_op_begin(const OpInfo& op) override;
  void on_op_end(const OpInfo& op) override;
  void on_graph_captured(const GraphReplay& g) override;
  void on_graph_replay(const GraphReplay& g) override;
  void on_step_collected(int64_t step) override;

  // The op-log index of the op now running, or -1 (read by the CUPTI
  // collector in its own on_op_begin, which runs after this one).
  int64_t current_launch() const { return current_launch_; }
  int64_t current_step() const { return in_step_ ? steps_.back().step : -1; }

  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::vector<LayerRecord>& layers() const { return layers_; }
  const std::vector<OpLaunch>& launches() const { return launches_; }
  const std::vector<ReplayRecord>& replays() const { return replays_; }
  const std::vector<CaptureRecord>& captures() const { return captures_; }
  const std::vector<ReplayCost>& replay_costs() const { return replay_costs_; }
  // Problems in the hook sequence (unbalanced begin/end), one line each.
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  uint64_t (*clock_)();
  std::vector<StepRecord> steps_;
  std::vector<LayerRecord> layers_;
  std::vector<OpLaunch> launches_;
  std::vector<ReplayRecord> replays_;
  std::vector<CaptureRecord> captures_;
  std::vector<ReplayCost> replay_costs_;
  std::vector<std::string> errors_;
  int64_t current_launch_ = -1;
  int64_t open_layer_ = -1;  // index into layers_
  bool in_step_ = false;
  void error(std::string message);
};

}  // namespace lantern::harness
