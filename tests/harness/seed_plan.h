#pragma once
// Test helper (header only): the engine's own op table and activation layout
// (engine/op_table.h) for a small model, and a driver that replays one step
// of the forward pass through an Observer: the same ops, in the same order,
// declaring the same view reads and writes as Model::forward. `Plan` can
// plant a wrong alias into the layout.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/observer.h"
#include "engine/op_table.h"
#include "kernels/registry.h"

namespace lantern::harness::testing {

enum class Plan {
  seed,          // the seed's two aliases: q / attn_out and o_out / mlp_down
  up_over_gate,  // WRONG: "up" shares "gate"'s buffer (swiglu still reads gate)
  k_over_q,      // WRONG: "k" shares "q"'s buffer (rope still reads q)
};

// The engine's arena layout and view ids (ActivationViews: a->x, a->q, ...).
struct SeedArena : ActivationViews {
  Arena arena;
};

// A small model: hidden 64, 4 q heads and 1 kv head of 16, MLP 256, vocab 1000.
inline ModelConfig seed_config(int layers = 2, int hidden = 64) {
  ModelConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = 4 * hidden;
  c.num_layers = layers;
  c.num_q_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = hidden / 4;
  c.vocab_size = 1000;
  return c;
}

inline std::unique_ptr<SeedArena> make_seed_arena(Plan plan = Plan::seed, size_t rows = 4,
                                                  size_t hidden = 64) {
  auto s = std::make_unique<SeedArena>();
  const int r = static_cast<int>(rows);
  std::vector<ViewDecl> layout = activation_layout(seed_config(2, static_cast<int>(hidden)), r, r, 4, 256);
  auto move_view = [&](const char* view, const char* onto) {
    auto it = std::find_if(layout.begin(), layout.end(), [&](const ViewDecl& d) { return d.view == view; });
    it->buffer = onto;
  };
  if (plan == Plan::up_over_gate) move_view("up", "gate");
  if (plan == Plan::k_over_q) move_view("k", "q_attn");
  static_cast<ActivationViews&>(*s) = declare_activations(s->arena, layout);
  return s;
}

// The CPU reference kernel entry of a family (real registry entries).
inline const kernels::KernelEntry* cpu_entry(kernels::Family f) {
  return &kernels::Registry::global().best(f, kernels::Backend::cpu);
}

// Calls on_op_begin/on_op_end for one op; `body` runs between them.
template <class Body>
void seed_op(Observer& obs, const char* name, int layer, kernels::Family family,
             std::vector<ViewId> reads, std::vector<ViewId> writes, Body&& body,
             double bytes = 1e6, double flops = 2e6, OpInfo::GraphMode mode = OpInfo::kEager) {
  OpInfo info;
  info.graph = mode;
  info.op = name;
  info.layer = layer;
  info.kernel = cpu_entry(family);
  info.cost = kernels::Cost{bytes, flops};
  info.reads = reads.data();
  info.num_reads = static_cast<int>(reads.size());
  info.writes = writes.data();
  info.num_writes = static_cast<int>(writes.size());
  obs.on_op_begin(info);
  body();
  obs.on_op_end(info);
}

inline StepInfo step_info(int64_t step, const char* phase, int seqs, int tokens) {
  StepInfo s;
  s.step = step;
  s.phase = phase;
  s.num_prefill_seqs = std::string(phase) == "prefill" ? seqs : 0;
  s.num_decode_seqs = std::string(phase) == "decode" ? seqs : 0;
  s.num_tokens = tokens;
  return s;
}

// The engine's ops of one step (engine/op_table.h): `phase` "prefill" or
// "decode", argmax head.
inline std::vector<OpSpec> seed_ops(const ActivationViews& a, const char* phase, int layers) {
  StepKind kind{std::string(phase) == "prefill" ? StepKind::prefill : StepKind::decode, StepKind::argmax};
  return step_ops(layers, a, kind);
}

// One step of the engine's forward pass, hooked as Model::forward hooks it
// (layer hooks around each layer's ops). `body` runs inside every op (e.g. a
// kernel launch); without it ops are empty. No step hooks: `mode` marks the
// ops eager, captured into a CUDA graph, or replayed from one.
template <class Body>
void run_seed_ops(Observer& obs, const SeedArena& a, const char* phase, int layers, Body&& body,
                  OpInfo::GraphMode mode = OpInfo::kEager) {
  int layer = -1;
  for (const OpSpec& o : seed_ops(a, phase, layers)) {
    if (o.layer != layer) {
      if (layer >= 0) obs.on_layer_end(layer);
      layer = o.layer;
      if (layer >= 0) obs.on_layer_begin(layer);
    }
    seed_op(obs, o.name, o.layer, o.family, std::vector<ViewId>(o.reads.begin(), o.reads.begin() + o.num_reads),
            std::vector<ViewId>(o.writes.begin(), o.writes.begin() + o.num_writes), body, 1e6, 2e6, mode);
  }
  if (layer >= 0) obs.on_layer_end(layer);
}

template <class Body>
void run_seed_step(Observer& obs, const SeedArena& a, int64_t step, const char* phase, int layers,
                   Body&& body, bool step_hooks = true) {
  StepInfo info = step_info(step, phase, 2, std::string(phase) == "prefill" ? 16 : 2);
  if (step_hooks) obs.on_step_begin(info);
  run_seed_ops(obs, a, phase, layers, body);
  if (step_hooks) obs.on_step_end(info);
}

// The ops of a captured graph the way engine/model.cpp keeps them for its
// replays: OpInfo entries (kReplay) whose view lists live as long as the graph.
struct RecordedGraph {
  std::vector<std::vector<ViewId>> reads, writes;
  std::vector<OpInfo> ops;
  GraphReplay replay(int graph = 0) const {
    return GraphReplay{graph, ops.data(), static_cast<int>(ops.size())};
  }
};

class GraphRecorder : public Observer {
 public:
  explicit GraphRecorder(RecordedGraph& g) : g_(g) {}
  void on_op_begin(const OpInfo& op) override {
    g_.ops.push_back(op);
    g_.reads.emplace_back(op.reads, op.reads + op.num_reads);
    g_.writes.emplace_back(op.writes, op.writes + op.num_writes);
  }
  ~GraphRecorder() override {
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      g_.ops[i].reads = g_.reads[i].data();
      g_.ops[i].writes = g_.writes[i].data();
    }
  }

 private:
  RecordedGraph& g_;
};

// The seed decode step's ops as a recorded graph.
inline RecordedGraph record_seed_graph(const SeedArena& a, int layers) {
  RecordedGraph g;
  {
    GraphRecorder rec(g);
    run_seed_ops(rec, a, "decode", layers, [] {}, OpInfo::kReplay);
  }
  return g;
}

// The engine's start-up capture of a decode graph: its ops hooked with
// kCapture outside any step, then on_graph_captured. `graph` must outlive
// the observer's use of it (one per test, like the engine's graph).
inline void capture_seed_graph(Observer& obs, const SeedArena& a, int layers, const RecordedGraph& graph) {
  run_seed_ops(obs, a, "decode", layers, [] {}, OpInfo::kCapture);
  obs.on_graph_captured(graph.replay());
}

// A decode step the way the engine runs it with CUDA graphs: the graph
// (captured before) is launched, then one on_graph_replay hook follows.
inline void run_graph_step(Observer& obs, int64_t step, const RecordedGraph& graph) {
  StepInfo info = step_info(step, "decode", 2, 2);
  obs.on_step_begin(info);
  obs.on_graph_replay(graph.replay());
  obs.on_step_end(info);
}

inline void run_seed_step(Observer& obs, const SeedArena& a, int64_t step, const char* phase,
                          int layers) {
  run_seed_step(obs, a, step, phase, layers, [] {});
}

// Ops per step with `layers` layers, from the op table (embed + 15 per layer
// + final_norm, lm_head, argmax).
inline int seed_ops_per_step(int layers) {
  return static_cast<int>(seed_ops(*make_seed_arena(), "decode", layers).size());
}

}  // namespace lantern::harness::testing
