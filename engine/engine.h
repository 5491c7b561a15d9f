#pragma once
// Engine: the public API. Requests go into a thread-safe queue; each step()
// the scheduler (no CUDA) picks which sequences prefill and which decode; the
// Model runs that step through the kernel registry; the sampler picks tokens
// on the device; results stream out through per-request callbacks.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/communicator.h"
#include "engine/config.h"
#include "engine/observer.h"
#include "engine/weights.h"
#include "kernels/gemm_plan.h"
#include "kernels/registry.h"

namespace lantern {

// Limits: everything that sizes memory. Nothing is allocated after start-up.
struct EngineLimits {
  int max_batch_tokens = 512;      // rows in one step (prefill tokens + decode rows)
  int max_seqs = 16;               // concurrent sequences (slots)
  int max_context = 4096;          // tokens per sequence (prompt + generated); <= model max
  int kv_block_size = 16;          // tokens per KV block
  int kv_num_blocks = 0;           // 0: derived from kv_memory_fraction (cuda) or
                                   //    max_seqs * max_context (cpu)
  double kv_memory_fraction = 0.9; // cuda: share of the free memory left after weights,
                                   // arena and workspace given to the KV pool
  int max_queue = 4096;            // waiting requests; submit() beyond this is refused
  int logits_rows = 0;             // rows of the logits buffer; 0: max_seqs (score mode
                                   // asks for more)

  void validate(const ModelConfig& cfg) const;  // throws naming the limit and the fix
  nlohmann::json to_json() const;
  static EngineLimits from_json(const nlohmann::json& j);  // unknown keys are an error
};

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  uint64_t seed = 0;         // per request; draws depend on (seed, token index) only
};

struct Request {
  std::vector<int32_t> prompt;  // token ids (BOS included if wanted)
  int max_new_tokens = 128;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::string tag;              // free text carried into outputs
  // Teacher forcing (lantern score): feed these ids as the generated tokens
  // instead of sampling; logits of every position are delivered to on_logits.
  std::vector<int32_t> forced_tokens;
  bool all_logits = false;
  // Called on the engine thread for every generated token (streaming).
  std::function<void(int64_t request_id, int32_t token)> on_token;
  // Called with host copies of logits rows: (request id, position, row[vocab]).
  std::function<void(int64_t, int, const float*)> on_logits;
};

struct RequestResult {
  int64_t id = -1;
  std::string tag;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // generated
  std::string finish_reason;    // "eos", "length", "context", "error"
  std::string error;            // set when finish_reason == "error"
  double submit_s = 0, first_token_s = 0, finish_s = 0;  // engine clock (seconds)
  double admit_s = 0;  // first scheduled (its prefill began): admission wait = admit_s - submit_s
  int preemptions = 0;
};

// Where the device memory goes, printed at start-up.
struct MemoryBudget {
  size_t weights = 0, arena = 0, kv_pool = 0, workspace = 0, block_tables = 0;
  size_t cuda_graphs = 0;     // decode and prefill graphs: device memory cudaMemGetInfo saw them take
  int kv_blocks = 0;          // usable KV blocks (the scheduler's pool)
  int kv_scratch_blocks = 0;  // + the scratch block of graph pad rows (in kv_pool)
  int cuda_graph_count = 0;    // decode and prefill graphs
  int prefill_graph_count = 0; // of which prefill graphs (per token bucket, docs/engine.md)
  size_t total() const { return weights + arena + kv_pool + workspace + block_tables + cuda_graphs; }
  std::string table() const;  // human-readable, one line per item
  nlohmann::json to_json() const;
};

struct EngineOptions {
  kernels::Backend backend = kernels::Backend::cpu;
  int gpu = 0;  // cuda: the device index (--gpu N); the weights must be loaded on it
  EngineLimits limits;
  // Kernel variant overrides, family name -> variant name or number. The
  // pseudo-family "fusion" ("on" / "off") sets `fused` below, so `--kernels
  // fusion=off` and experiment files can swap the fused op table back.
  std::vector<std::pair<std::string, std::string>> kernels;
  // Fused op table (docs/engine.md, Fusion): one GEMM over the q/k/v weights
  // and one over gate/up (views of the same weight bytes), residual + RMSNorm
  // and RoPE + KV write in one kernel each. Needs adjacent weights
  // (Weights::fusable); otherwise the unfused table runs.
  bool fused = true;
  Observer* observer = nullptr;  // harness; never steers the engine
  bool use_cuda_graphs = true;   // cuda: capture decode graphs per batch-size bucket at start-up
  // cuda, with use_cuda_graphs: also capture pure-prefill steps per token
  // bucket at start-up and replay them padded (docs/engine.md, Prefill
  // graphs). The pseudo-family "prefill_graphs" ("on" / "off") in `kernels`
  // sets it, so `--kernels prefill_graphs=off` and experiment files A/B it.
  bool prefill_graphs = true;
  // Overlapped decode (docs/architecture.md, "Overlapped steps"): a pure
  // decode step stays in flight while the host launches its continuation and
  // postprocesses it, so host time no longer adds to each step. Off with
  // tensor parallelism. The pseudo-family "overlap" ("on" / "off") in
  // `kernels` sets it (--kernels overlap=off, experiment files).
  bool overlap = true;
  // The pruned last layer (docs/engine.md): steps with fewer logit rows than
  // rows (prompts, chunks, mixed steps) run their last layer past the KV write
  // on the logit rows only. The pseudo-family
  // "prune_last" ("on" / "off") in `kernels` sets it (--kernels prune_last=off).
  bool prune_last_layer = true;
  // The folded decode attention (docs/engine.md, "The folded decode
  // attention"): decode steps whose contexts are all at most
  // fold_max_context tokens run each layer's qkv_rope and attention_decode as
  // one op, qkv_attention. "auto" folds when the qkv_rope variant is made for
  // it (qkv_rope.4: the attention in the q/k/v GEMV's launch), "on" folds with
  // any variant (the composed ones launch the attention after the GEMV: the
  // same kernels as the separate ops), "off" never. The pseudo-family
  // "fold_attention" in `kernels` sets it (--kernels fold_attention=on).
  std::string fold_attention = "auto";
  int fold_max_context = 512;
  // Steps whose rows are all logit rows, in order (pure decode steps, score
  // mode), end the last layer with down_proj_residual_norm and the final norm
  // (StepKind::fuse_final; docs/engine.md, Decode): down_proj, mlp_residual
  // and final_norm as one op. Off until measured on the H200 (session 33).
  // The pseudo-family "final_fuse" ("on" / "off") in `kernels` sets it.
  bool fuse_final_norm = false;
  int profile_first_step = -1;   // cudaProfilerStart before this step (nsys), -1 off
  int profile_last_step = -1;    // cudaProfilerStop after this step
  // The engine clock (seconds); empty: steady_clock since construction. Tests
  // inject a fake clock to check arrival timing (harness/serving_driver.h).
  std::function<double()> clock;
  // Tensor parallelism (docs/tensor-parallel.md): this process's rank of the
  // group (null: off; world 1 runs the TP path with a one-rank group). The config given to the Engine is the full
  // model's; the weights must be this rank's shard (Weights::load's `shard`).
  // Rank 0 schedules and broadcasts each step's plan; ranks > 0 call follow().
  Communicator* comm = nullptr;
  // With `comm`: the LM head replicated on every rank, or split by vocabulary
  // rows (each rank V/N rows, an all_gather of the logits; --tp-lm-head). The
  // weights must be loaded with the same choice (ShardSpec::lm_head).
  TpLmHead tp_lm_head = TpLmHead::replicated;
  // With `comm`: the all_reduce choice `comm` was made with (--tp-allreduce;
  // make_nccl_comm's `path`), recorded in describe() as
  // config.tensor_parallel.all_reduce_path so `lantern rerun` repeats it.
  TpAllReduce tp_all_reduce = TpAllReduce::automatic;
};

// Wall time of the last step() call split into host bookkeeping (admission,
// scheduling, the step input, postprocess and stop checks) and the model
// (Model::launch: metadata upload, the launches or graph replay; Model::wait:
// the wait for the collected step's tokens).
// Synchronous steps: host_s adds to every step. Overlapped decode steps: the
// host time runs while the device computes the next step; a call that only
// launched (nothing collected) has rows == 0.
// `rows` / `decode_rows`: the step's rows and, of them, single-token decodes
// of a sequence past its prompt (the others are prompt chunks, first or
// continuing, and re-prefills after preemption), so a benchmark can tell a
// pure decode step of its whole batch from a mixed one (the scheduler puts
// decode rows and prompt chunks in one step).
struct StepTiming {
  double host_s = 0;
  double model_s = 0;
  int rows = 0;
  int decode_rows = 0;
};

// Overlapped decode so far: continuations launched before the step they
// continue was postprocessed, and their rows computed for sequences that
// had stopped (EOS) in that step, whose tokens were ignored.
struct OverlapStats {
  int64_t continuations = 0;
  int64_t discarded_rows = 0;
};

class EngineImpl;

class Engine {
 public:
  Engine(const ModelConfig& cfg, Weights&& weights, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates the request (prompt length vs context, ids in the
  // vocabulary, queue capacity) and throws lantern::Error with the fix;
  // otherwise queues it and returns its id.
  int64_t submit(Request request);
  // One scheduler step (prefills + decodes). Returns false when idle. Call
  // step() and run_until_idle() from one thread (the engine thread).
  bool step();
  void run_until_idle();
  // Tensor-parallel ranks > 0: run every step rank 0 broadcasts, on this
  // rank's shard, until rank 0 ends the group (its Engine is destroyed, or
  // end_group()). Throws when a peer fails.
  void follow();
  // Rank 0: tells the followers there are no more steps (also done by the
  // destructor). Idempotent.
  void end_group();
  // Thread-safe: true when every submitted request has finished.
  bool idle() const;
  // Thread-safe. Results of finished requests, in finishing order, removed
  // from the engine.
  std::vector<RequestResult> take_finished();

  const ModelConfig& config() const;
  const EngineLimits& limits() const;
  const MemoryBudget& memory_budget() const;
  const kernels::KernelSet& kernel_set() const;
  int64_t steps_run() const;
  const StepTiming& last_step_timing() const;
  OverlapStats overlap_stats() const;  // engine thread
  double now_s() const;  // engine clock used in RequestResult
  // Resolved config: model, limits, kernels, backend; gemm_plans when the gemm
  // variant measured per-shape plans (gemm.6).
  nlohmann::json describe() const;
  // gemm.6's cuBLASLt plans for this model's GEMMs (empty for other variants).
  std::vector<kernels::GemmPlan> gemm_plans() const;

 private:
  std::unique_ptr<EngineImpl> impl_;
};

// One entry of describe()'s gemm_plans (the manifest's config.gemm_plans)
// and back into a plan (for kernels::pin_gemm_plans on `lantern rerun`; the
// device is not recorded); from_json throws on a missing field.
nlohmann::json gemm_plan_json(const kernels::GemmPlan& p);
kernels::GemmPlan gemm_plan_from_json(const nlohmann::json& j);
// A whole config.gemm_plans array (null: none); throws on a malformed entry.
std::vector<kernels::GemmPlan> gemm_plans_from_json(const nlohmann::json& list);
// The plans array a run's manifest (config.gemm_plans) or a `lantern bench
// --json` file (gemm_plans) recorded; null when it has none.
nlohmann::json recorded_gemm_plans_json(const nlohmann::json& doc);

}  // namespace lantern
