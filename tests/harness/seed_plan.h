#pragma once
// Test helper (header only): an arena laid out like the seed engine's
// (engine/model.cpp) and a driver that replays one step of its forward pass
// through an Observer: the same ops, in the same order, declaring the same
// view reads and writes. `Plan` can plant a wrong alias.
#include <memory>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/observer.h"
#include "kernels/registry.h"

namespace lantern::harness::testing {

enum class Plan {
  seed,          // the seed's two aliases: q / attn_out and o_out / mlp_down
  up_over_gate,  // WRONG: "up" shares "gate"'s buffer (swiglu still reads gate)
  k_over_q,      // WRONG: "k" shares "q"'s buffer (rope still reads q)
};

struct SeedArena {
  Arena arena;
  ViewId x, xn, q, attn_out, k, v, o_out, mlp_down, gate, up, mlp_act, logits_in, logits;
};

inline std::unique_ptr<SeedArena> make_seed_arena(Plan plan = Plan::seed, size_t rows = 4,
                                                  size_t hidden = 64) {
  auto s = std::make_unique<SeedArena>();
  Arena& a = s->arena;
  const size_t act = 4 * rows * hidden, inter = 4 * act;
  s->x = a.add_buffer_view("x", act, "[rows, hidden] f32");
  s->xn = a.add_buffer_view("xn", act, "[rows, hidden] f32");
  int q_attn = a.add_buffer("q_attn", act, "[rows, q_dim] f32");
  s->q = a.add_view("q", q_attn);
  s->attn_out = a.add_view("attn_out", q_attn);
  if (plan == Plan::k_over_q) {
    s->k = a.add_view("k", q_attn, 0, act / 4);
    s->v = a.add_buffer_view("v", act / 4);
  } else {
    s->k = a.add_buffer_view("k", act / 4);
    s->v = a.add_buffer_view("v", act / 4);
  }
  int o_down = a.add_buffer("o_down", act);
  s->o_out = a.add_view("o_out", o_down);
  s->mlp_down = a.add_view("mlp_down", o_down);
  int gate = a.add_buffer("gate", inter);
  s->gate = a.add_view("gate", gate);
  s->up = plan == Plan::up_over_gate ? a.add_view("up", gate) : a.add_buffer_view("up", inter);
  s->mlp_act = a.add_buffer_view("mlp_act", inter);
  s->logits_in = a.add_buffer_view("logits_in", act);
  s->logits = a.add_buffer_view("logits", 4 * rows * 1000);
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

// One step of the seed's forward pass (model.cpp's op order). `body` runs
// inside every op (e.g. a kernel launch); without it ops are empty.
// Ops of one forward pass (no step hooks): `mode` marks them eager, captured
// into a CUDA graph, or replayed from one (as engine/model.cpp reports them).
template <class Body>
void run_seed_ops(Observer& obs, const SeedArena& a, const char* phase, int layers, Body&& body,
                  OpInfo::GraphMode mode = OpInfo::kEager) {
  using kernels::Family;
  auto op = [&](const char* name, int layer, Family f, std::vector<ViewId> r, std::vector<ViewId> w) {
    seed_op(obs, name, layer, f, std::move(r), std::move(w), body, 1e6, 2e6, mode);
  };
  op("embed", -1, Family::embedding, {}, {a.x});
  for (int l = 0; l < layers; ++l) {
    obs.on_layer_begin(l);
    op("attn_norm", l, Family::rmsnorm, {a.x}, {a.xn});
    op("q_proj", l, Family::gemm, {a.xn}, {a.q});
    op("k_proj", l, Family::gemm, {a.xn}, {a.k});
    op("v_proj", l, Family::gemm, {a.xn}, {a.v});
    op("rope", l, Family::rope, {a.q, a.k}, {a.q, a.k});
    op("kv_write", l, Family::kv_write, {a.k, a.v}, {});
    if (std::string(phase) == "prefill")
      op("attention_prefill", l, Family::attention_prefill, {a.q, a.k, a.v}, {a.attn_out});
    else
      op("attention_decode", l, Family::attention_decode, {a.q}, {a.attn_out});
    op("o_proj", l, Family::gemm, {a.attn_out}, {a.o_out});
    op("attn_residual", l, Family::residual, {a.x, a.o_out}, {a.x});
    op("mlp_norm", l, Family::rmsnorm, {a.x}, {a.xn});
    op("gate_proj", l, Family::gemm, {a.xn}, {a.gate});
    op("up_proj", l, Family::gemm, {a.xn}, {a.up});
    op("swiglu", l, Family::swiglu, {a.gate, a.up}, {a.mlp_act});
    op("down_proj", l, Family::gemm, {a.mlp_act}, {a.mlp_down});
    op("mlp_residual", l, Family::residual, {a.x, a.mlp_down}, {a.x});
    obs.on_layer_end(l);
  }
  op("final_norm", -1, Family::rmsnorm, {a.x}, {a.logits_in});
  op("lm_head", -1, Family::gemm, {a.logits_in}, {a.logits});
  op("argmax", -1, Family::argmax, {a.logits}, {});
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

// A decode step the way the engine runs it with CUDA graphs: the first time
// (`capture`) the ops are recorded into a graph, which is then launched;
// every time, one on_graph_replay hook follows the launch. `graph` must
// outlive the observer's use of it (one per test, like the engine's graph).
inline void run_graph_step(Observer& obs, const SeedArena& a, int64_t step, int layers, bool capture,
                           const RecordedGraph& graph) {
  StepInfo info = step_info(step, "decode", 2, 2);
  obs.on_step_begin(info);
  if (capture) run_seed_ops(obs, a, "decode", layers, [] {}, OpInfo::kCapture);
  obs.on_graph_replay(graph.replay());
  obs.on_step_end(info);
}

inline void run_seed_step(Observer& obs, const SeedArena& a, int64_t step, const char* phase,
                          int layers) {
  run_seed_step(obs, a, step, phase, layers, [] {});
}

// Ops per seed step with `layers` layers (embed + 15 per layer + 3 at the end).
constexpr int seed_ops_per_step(int layers) { return 1 + 15 * layers + 3; }

}  // namespace lantern::harness::testing
