#pragma once
// Model: runs one engine step (any mix of fresh prefills, prefill chunks and
// decodes) by walking the op table (op_table.h) through the kernel registry.
// Owns the activation arena, the KV pool, the device block tables, the shared
// workspace, the step metadata and the decode CUDA graphs. Nothing is
// allocated after construction.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>  // graph handles (the model owns the CUDA side of a step)

#include "engine/arena.h"
#include "engine/communicator.h"
#include "engine/config.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/model_meta.h"
#include "engine/op_table.h"
#include "engine/weights.h"
#include "kernels/gemm_plan.h"

namespace lantern {

// Host description of one step. Rows are ordered: fresh-prefill rows first
// (grouped by sequence, fresh_starts), then paged rows (decodes and later
// prompt chunks), each attending to its sequence's cache up to its position.
struct StepInput {
  std::vector<int32_t> tokens;        // [n]
  std::vector<int32_t> positions;     // [n]
  std::vector<int32_t> slots;         // [n] sequence slot of each row
  std::vector<int32_t> fresh_starts;  // [num_fresh + 1] row offsets; {0} when none
  int max_fresh_len = 0;
  std::vector<int32_t> logit_rows;    // [r] rows whose logits are computed
  // Per logit row sampling parameters.
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, gen_index;
  std::vector<uint64_t> seeds;
  bool copy_logits = false;           // bring every logits row back to the host
  std::vector<KvTableUpdate> table_updates;
  // Overlapped decode (Engine, docs/architecture.md "Overlapped steps"): when
  // not empty ([n]), row i's token is the previous launched step's token of
  // its logit row token_src[i], gathered on the device (tokens[i] is ignored;
  // token_src[i] = -1: tokens[i], a forced token), so this step can be
  // launched before the host has seen that token.
  std::vector<int32_t> token_src;
  int num_rows() const { return static_cast<int>(tokens.size()); }
  int num_fresh_rows() const { return fresh_starts.empty() ? 0 : fresh_starts.back(); }
};

struct StepOutput {
  std::vector<int32_t> tokens;  // [r] sampled / argmax per logit row
  std::vector<float> logits;    // [r, vocab] when copy_logits
};

// CUDA graphs (docs/architecture.md, CUDA graphs): pure decode steps are
// replayed from graphs captured at start-up, one per batch-size bucket (1, 2,
// 4, ... up to max_seqs) and head (argmax, sampling). A step of n rows
// replays the smallest bucket b >= n; its rows n..b-1 are padding made
// harmless without touching the kernels: each pad row is token 0 at position
// 0 (context length 1) in the scratch slot (index max_seqs, never handed
// out by the scheduler), whose block-table rows point at one reserved
// scratch KV block; their logits and tokens are ignored.
//
// Pure prefill steps (every row a fresh prompt row) replay graphs too, one
// per token bucket (prefill_token_buckets), class of fresh sequences (1, or
// up to min(max_seqs, logits_rows)) and head (none, argmax, sampling). Pad
// rows n..bucket-1 are scratch-slot rows as above but belong to no sequence:
// the captured attention_prefill grid covers `seqs` sequences of up to
// `bucket` rows and reads the sequence bounds from step_meta, so pad rows are
// never attended to and unused sequences (bounds n, n) are empty. Pad logit
// rows (r..seqs-1) are greedy rows whose tokens are ignored.
// The shared-memory carveout (percent) our kernels prefer in a step of `rows`
// rows, or -1 for the driver's choice per kernel (kernels::set_launch_carveout;
// Model::forward sets it for the step's launches and graph captures). Default:
// 50 for one-row steps (H200, session 12: the batch-1 decode step 10-40 us
// faster in three calls with every kernel of ours at 50 % shared memory;
// batch 2-4 unchanged, 8-64 slower, so larger steps keep the driver's choice).
// LANTERN_SMALL_BATCH_CARVEOUT=P:N (P % up to N rows) or =off overrides it,
// read once: an experiment knob.
int small_batch_carveout(int rows);

class Model {
 public:
  // `comm` (tensor parallelism, may be null): `cfg` is then the rank's
  // config (shard_config) and `weights` its shard; the op table gets an
  // all_reduce after o_proj and down_proj. `lm_head` split (needs `comm`):
  // the weights hold this rank's vocabulary rows of the LM head, and an
  // all_gather after lm_head assembles the logits rows.
  Model(const ModelConfig& cfg, const Weights& weights, Device& device, const EngineLimits& limits,
        const kernels::KernelSet& kernels, Observer* observer, bool use_cuda_graphs,
        bool fused = false, Communicator* comm = nullptr, bool prefill_graphs = false,
        TpLmHead lm_head = TpLmHead::replicated, bool prune_last_layer = false, int fold_max_context = 0,
        bool fuse_final = false);
  ~Model();

  // run = launch + wait. launch enqueues the step on the device and returns;
  // wait blocks until the oldest launched step's tokens are on the host and
  // returns them. At most two steps are in flight (launch N, launch N+1,
  // wait N, ...): the pinned metadata mirror and token buffers are double
  // buffered. A step that copies logits must be the only one in flight.
  StepOutput run(const StepInput& in);
  void launch(const StepInput& in);
  StepOutput wait();
  int in_flight() const { return static_cast<int>(inflight_.size()); }

  const Arena& arena() const { return arena_; }
  const OpTable& op_table() const { return *op_table_; }
  // True when the step runs the fused op table (fused q/k/v and gate/up
  // weights, add_rmsnorm, rope_kv_write; op_table.h, step_ops).
  bool fused() const { return v_.fused(); }
  const MemoryBudget& budget() const { return budget_; }
  int kv_num_blocks() const { return kv_num_blocks_; }
  int max_blocks_per_seq() const { return max_blocks_per_seq_; }
  // Decode batch sizes with a captured graph (empty: graphs off).
  const std::vector<int>& graph_buckets() const { return buckets_; }
  // Prefill token buckets with captured graphs (empty: prefill runs eagerly).
  const std::vector<int>& prefill_buckets() const { return prefill_buckets_; }
  bool prefill_graphs() const { return !prefill_buckets_.empty(); }
  // Steps with fewer logit rows than rows prune their last layer to the logit
  // rows (StepKind::prune): requested and the op table can (can_prune_last_layer).
  bool prunes_last_layer() const { return prune_last_; }
  // Decode steps whose contexts are all at most this many tokens fold their
  // attention into qkv_rope (StepKind::fold; 0: never): requested and the op
  // table can (can_fold_attention).
  int fold_max_context() const { return fold_max_context_; }
  // Steps whose rows are all logit rows in order end the last layer with the
  // final norm (StepKind::fuse_final): requested and the op table can.
  bool fuses_final_norm() const { return fuse_final_; }
  // gemm.6's measured cuBLASLt plans for this model's GEMM shapes on its GPU
  // (empty when the chosen gemm variant makes none).
  std::vector<kernels::GemmPlan> gemm_plans() const;

 private:
  const ModelConfig& cfg_;
  const Weights& w_;
  Device& dev_;
  EngineLimits limits_;
  kernels::KernelSet kernels_;
  Observer* obs_;
  Communicator* comm_ = nullptr;  // tensor parallelism (any world, 1 included)
  Arena arena_;
  ActivationViews v_{};
  std::unique_ptr<OpTable> op_table_;
  MetaLayout meta_;
  MemoryBudget budget_;
  int kv_num_blocks_ = 0, max_blocks_per_seq_ = 0;
  bool fuse_ = false;               // requested; v_.fused() says what runs
  TpLmHead lm_head_ = TpLmHead::replicated;
  int pad_slot_ = 0;                // == max_seqs: the scratch slot of graph pad rows
  void* kv_pool_ = nullptr;         // [blocks (+1 scratch)][2][block_size][n_kv][head_dim] act
  int32_t* block_tables_ = nullptr; // [layers][max_seqs + 1][max_blocks_per_seq]
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* cublas_ws_ = nullptr;
  void* meta_host_ = nullptr;       // pinned mirror of the step_meta buffer (the current launch's)
  void* meta_host_bufs_[2] = {nullptr, nullptr};  // meta_host_ alternates between these per launch
  int32_t* tokens_host_[2] = {nullptr, nullptr};  // pinned: each launch's tokens, copied back
  cudaEvent_t tokens_ready_[2] = {nullptr, nullptr};
  // LANTERN_STEP_GPU_LOG=1 (a diagnosis knob): timing events around each launch, the stream's time
  // from the step's first enqueued work to its tokens, printed by wait() on stderr.
  bool step_gpu_log_ = false;
  cudaEvent_t step_t0_[2] = {nullptr, nullptr}, step_t1_[2] = {nullptr, nullptr};
  struct InFlight {
    int buf = 0, r = 0, n = 0;
    bool copy_logits = false;
  };
  std::deque<InFlight> inflight_;   // launched, not yet waited for (oldest first)
  int next_buf_ = 0;
  // This step's context lengths in that mirror (attention_decode's cost reads them).
  const int32_t* host_ctx_lens() const {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(meta_host_) + meta_.ctx_lens);
  }
  const int32_t* host_head_ctx_lens() const {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(meta_host_) + meta_.head_ctx_lens);
  }
  int max_table_updates_ = 0;
  size_t act_bytes_ = 0;

  // Start-up, in order (model.cpp).
  void declare_arena();
  void allocate_workspace();
  void allocate_kv();
  void fill_budget();
  void prepare_kernels();  // the variants' prepare hooks, before any graph capture
  size_t table_entries() const;
  size_t block_bytes() const;

  // What the forward pass needs besides the metadata already on the device.
  struct ForwardShape {
    int n = 0, r = 0, nf = 0, num_fresh = 0, max_fresh_len = 0;
    // Each paged row is the only row of its sequence (AttentionDecodeArgs::
    // one_row_per_seq); decode graphs are captured so and replayed only so.
    bool one_row_per_seq = false;
    // The same for the logit rows (the pruned last layer's attention_head).
    bool head_one_row_per_seq = false;
    int max_context = 0;  // the paged rows' longest context (position + 1)
    bool logits_in_order = false;  // every row is a logit row, in row order (r == n)
    const int32_t* host_fresh_starts = nullptr;
    StepKind kind;
  };
  static ForwardShape shape_of(const StepInput& in);
  // Sets s.kind.prune: steps whose logit rows are fewer than their rows, when
  // prune_last_ (pure decode steps, score mode and decode graphs never prune).
  void choose_pruning(ForwardShape& s) const;
  // Sets s.kind.fold: pure decode steps whose contexts are at most fold_max_context_.
  void choose_folding(ForwardShape& s) const;
  // Sets s.kind.fuse_final: fuse_final_ and every row a logit row in order, no pruning.
  void choose_final(ForwardShape& s) const;
  void upload_meta(const StepInput& in, const MetaPad& pad);
  void gather_tokens(int n);  // ids[i] = out_tokens[token_src[i]], i < n (overlapped decode)
  void apply_table_updates(const std::vector<KvTableUpdate>& updates);

  // The forward pass walks the op table (model_forward.cpp).
  void forward(const ForwardShape& s);
  void launch_op(const OpSpec& o, const ForwardShape& s);
  void launch_attention(const OpSpec& o, const ForwardShape& s);  // the attention_* op kinds
  kernels::KvCacheRef kv_cache(int layer) const;
  template <class Args>
  void op(const OpSpec& o, const Args& args);
  void attention_mixed(const OpSpec& o, const kernels::AttentionPrefillArgs& prefill,
                       const kernels::AttentionDecodeArgs& decode);
  // The collectives (model_tp.cpp): reported to observers like an op.
  template <class Run>
  void collective(const OpSpec& o, size_t bytes, size_t elements, const Run& run);
  void all_reduce(const OpSpec& o, int rows);
  void all_gather(const OpSpec& o, int logit_rows);
  // An engine-side op (no registry kernel: the collectives, head_gather),
  // reported to observers and recorded in a capture like a registry op.
  void engine_op(const OpSpec& o, kernels::Cost cost, const std::function<void()>& run);
  template <class Run>
  void observed(const OpInfo& info, const Run& run);  // model_forward.cpp
  void head_gather(const OpSpec& o, const ForwardShape& s);  // x, q logit rows -> head_x, head_q

  // CUDA graphs (model_graphs.cpp).
  struct Graph {
    MetaPad shape;                // rows (the bucket), logit rows, fresh sequences captured
    cudaGraphExec_t exec = nullptr;
    std::vector<OpInfo> ops;      // as every replay reports them (kReplay, graph_kernels)
  };
  bool graphs_enabled_ = false;
  std::vector<int> buckets_;              // ascending
  std::vector<Graph> graphs_;             // decode: decode_kinds_ * bucket index + 2 * fold + sampling; then prefill
  int decode_kinds_ = 2;                  // decode graphs per bucket: argmax / sample (x folded / not)
  bool prefill_requested_ = false;
  bool prune_last_ = false;  // requested, and the op table can
  int fold_max_context_ = 0;  // requested (and the op table can): StepKind::fold's bound
  bool fuse_final_ = false;   // requested, and the op table can (StepKind::fuse_final)
  std::vector<int> prefill_buckets_;      // ascending (empty: no prefill graphs)
  std::vector<int> prefill_seqs_;         // fresh-sequence classes: {1} or {1, many}
  int prefill_base_ = 0;                  // graphs_ index of the first prefill graph
  std::vector<int32_t> capture_starts_;   // host sequence bounds while capturing a prefill graph
  bool capturing_ = false;
  bool preparing_ = false;                // prepare_kernels: op() prepares, launches nothing
  std::set<std::tuple<int, int, bool>> gemm_shapes_;  // (n, k, c_f32) planned by prepare_kernels (gemm and the fused families)
  std::vector<OpInfo> captured_;          // during a capture: the ops so far (kCapture)
  std::vector<cudaGraphNode_t> leaves_;   // ... and the capture's last node after each
  void capture_graphs();
  void capture_prefill_graphs();
  void capture_set(int first, int count);  // capture graphs_[first, first + count), report each
  void capture(Graph& g, const ForwardShape& s);
  bool can_capture_prefill() const;
  int graph_index(const ForwardShape& s) const;  // -1: run eagerly
  int prefill_graph_index(const ForwardShape& s) const;
  void replay(int index);
  void refresh_decode_costs(Graph& g) const;
  cudaGraphNode_t capture_leaf() const;
  void count_graph_kernels(cudaGraph_t graph, std::vector<OpInfo>& ops) const;
  void destroy_graphs();
};

// Token buckets of prefill graphs for steps of up to `max_tokens` rows:
// 16, 32, 64, 128, then alternately x1.5 and x4/3 (192, 256, 384, 512, 768,
// 1024, ...), each below max_tokens, then max_tokens itself. A prompt pads to
// at most 1.5x its rows (less above 128, where the GEMMs start to fill the
// GPU and padding starts to cost); max_tokens < 16 gives {max_tokens}.
std::vector<int> prefill_token_buckets(int max_tokens);

}  // namespace lantern
