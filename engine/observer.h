#pragma once
// Observer: how the harness watches the engine without steering it.
//
// The engine calls these hooks at fixed points; the harness (harness/)
// implements them (NVTX ranges, alias tracker, KV recorder, memory map, run
// directory). With no observer attached each hook site is one predictable
// branch; with LANTERN_INSTRUMENTATION=0 the LANTERN_OBSERVE macro compiles
// the call away entirely.
#include <cstdint>
#include <string>

#include "kernels/registry.h"

namespace lantern {

class Arena;
using ViewId = int;

struct StepInfo {
  int64_t step = 0;          // 0-based engine step counter
  int num_prefill_seqs = 0;  // sequences prefilling in this step
  int num_decode_seqs = 0;   // sequences decoding in this step
  int num_tokens = 0;        // rows in the step's batch
  const char* phase = "";    // "prefill", "decode" or "mixed"
};

// One operation of the forward pass: one registry launch (or, for "attention",
// the prefill and decode launches of a mixed step) with the arena views it
// reads and writes.
struct OpInfo {
  const char* op = "";           // stable op name: "embed", "attn_norm", "q_proj", ...
  int layer = -1;                // -1 outside the layer loop
  const kernels::KernelEntry* kernel = nullptr;
  kernels::Cost cost;
  const ViewId* reads = nullptr;
  int num_reads = 0;
  const ViewId* writes = nullptr;
  int num_writes = 0;
  // CUDA graphs: kEager = launched now; kCapture = recorded into a graph being
  // captured (at start-up, outside any step; no GPU work yet; node -> op
  // attribution happens here);
  // kReplay = the op ran inside a replayed graph (hooks fire in op order for
  // accounting only: no launch happens between begin and end).
  enum GraphMode : uint8_t { kEager = 0, kCapture = 1, kReplay = 2 };
  GraphMode graph = kEager;
  // kReplay: the kernel nodes this op put into the graph when it was
  // captured (-1: unknown). A single-stream capture is a chain, so a
  // replay's kernels in start order map back to their ops by these counts,
  // whether or not a profiler saw the capture.
  int graph_kernels = -1;
};

// A captured CUDA graph, or one replay of it: the ops recorded at capture, in
// order, with graph == OpInfo::kReplay and their kernel-node counts. The
// array lives as long as the graph (the same pointer on every replay of it).
struct GraphReplay {
  int graph = -1;  // the engine's graph index: 2 * decode bucket index + sampling
  const OpInfo* ops = nullptr;
  int num_ops = 0;
};

struct KvEvent {
  enum Kind : uint8_t { alloc, free } kind = alloc;
  int64_t step = 0;
  int block = -1;    // physical block id
  int64_t seq = -1;  // request / sequence id
  int layer = -1;
};

struct KvStepStats {
  int64_t step = 0;
  int used_blocks = 0;
  int free_blocks = 0;
  int total_blocks = 0;
  int64_t used_token_slots = 0;  // tokens actually stored
  int64_t wasted_token_slots = 0;  // unused rows in partly filled last blocks
  int num_seqs = 0;
};

struct AllocEvent {
  std::string owner;  // "weights", "arena", "kv_pool", "cublas_workspace", "workspace", ...
  std::string name;
  uint64_t address = 0;
  uint64_t bytes = 0;
  kernels::Backend backend = kernels::Backend::cpu;
  bool is_free = false;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_alloc(const AllocEvent&) {}
  virtual void on_arena(const Arena&) {}  // after the arena is allocated
  virtual void on_step_begin(const StepInfo&) {}
  virtual void on_step_end(const StepInfo&) {}
  virtual void on_layer_begin(int layer) {}
  virtual void on_layer_end(int layer) {}
  virtual void on_op_begin(const OpInfo&) {}
  virtual void on_op_end(const OpInfo&) {}
  // A CUDA graph was captured: the engine captures its decode graphs at
  // start-up, before the first step, with every op hooked as kCapture; this
  // follows each graph's ops once, with g.ops' graph_kernels counted. Every
  // later replay of g.graph reports the same ops.
  virtual void on_graph_captured(const GraphReplay&) {}
  // A CUDA graph ran in this step (hooks fire after the launch, for
  // accounting only). The default replays the graph's layer and op hooks in
  // order; observers with a cheaper summary (timeline, alias tracker) or no
  // use for replays (NVTX, CUPTI, KV, memory) override it.
  virtual void on_graph_replay(const GraphReplay& g) {
    for (int i = 0; i < g.num_ops; ++i) {
      const OpInfo& op = g.ops[i];
      if (op.layer >= 0 && (i == 0 || g.ops[i - 1].layer != op.layer)) on_layer_begin(op.layer);
      on_op_begin(op);
      on_op_end(op);
      if (op.layer >= 0 && (i + 1 == g.num_ops || g.ops[i + 1].layer != op.layer))
        on_layer_end(op.layer);
    }
  }
  virtual void on_kv_event(const KvEvent&) {}
  virtual void on_kv_step(const KvStepStats&) {}
  // The step's tokens reached the host and were postprocessed. A synchronous
  // step reports it just before its on_step_end; an overlapped step (whose
  // range closes at its launch; docs/architecture.md, "Overlapped steps") in
  // a later step() call, after the next step's launch. Time from one
  // collection to the next is the step's share of the run.
  virtual void on_step_collected(int64_t /*step*/) {}
};

}  // namespace lantern

#if LANTERN_INSTRUMENTATION
#define LANTERN_OBSERVE(obs, call) \
  do {                             \
    if (obs) (obs)->call;          \
  } while (0)
#else
#define LANTERN_OBSERVE(obs, call) \
  do {                             \
  } while (0)
#endif
