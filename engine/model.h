#pragma once
// Model: runs one engine step (any mix of fresh prefills, prefill chunks and
// decodes) through the kernel registry. Owns the activation arena, the KV
// pool, the device block tables, the shared workspace and the step metadata.
// Nothing is allocated after construction.
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>  // graph handles (the model owns the CUDA side of a step)

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/weights.h"

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
  int num_rows() const { return static_cast<int>(tokens.size()); }
  int num_fresh_rows() const { return fresh_starts.empty() ? 0 : fresh_starts.back(); }
};

struct StepOutput {
  std::vector<int32_t> tokens;  // [r] sampled / argmax per logit row
  std::vector<float> logits;    // [r, vocab] when copy_logits
};

class Model {
 public:
  Model(const ModelConfig& cfg, const Weights& weights, Device& device, const EngineLimits& limits,
        const kernels::KernelSet& kernels, Observer* observer, bool use_cuda_graphs);
  int graphs_captured() const;
  ~Model();

  StepOutput run(const StepInput& in, const StepInfo& info);
  // True when run(in) will capture a new CUDA graph (its first decode step of
  // this batch size); told to observers through StepInfo::captures_graph.
  bool will_capture(const StepInput& in) const;

  const Arena& arena() const { return arena_; }
  const MemoryBudget& budget() const { return budget_; }
  int kv_num_blocks() const { return kv_num_blocks_; }
  int max_blocks_per_seq() const { return max_blocks_per_seq_; }

 private:
  struct Views;
  const ModelConfig& cfg_;
  const Weights& w_;
  Device& dev_;
  EngineLimits limits_;
  kernels::KernelSet kernels_;
  Observer* obs_;
  Arena arena_;
  std::unique_ptr<Views> v_;
  MemoryBudget budget_;
  int kv_num_blocks_ = 0, max_blocks_per_seq_ = 0;
  void* kv_pool_ = nullptr;         // [blocks][2][block_size][n_kv][head_dim] act
  int32_t* block_tables_ = nullptr; // [layers][max_seqs][max_blocks_per_seq]
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* cublas_ws_ = nullptr;
  void* meta_host_ = nullptr;       // pinned mirror of the step_meta buffer
  size_t meta_bytes_ = 0;
  int max_table_updates_ = 0;
  size_t act_bytes_ = 0;

  // What the forward pass needs besides the metadata already on the device.
  struct ForwardShape {
    int n = 0, r = 0, nf = 0, num_fresh = 0, max_fresh_len = 0;
    const int32_t* host_fresh_starts = nullptr;
    bool sampling = false;
  };
  // Ops recorded while capturing a graph, re-announced to the observer on replay.
  struct RecordedOp {
    OpInfo info;
    std::vector<ViewId> reads, writes;
    cudaGraphNode_t leaf = nullptr;  // the capture's last node after this op (observer attached)
  };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<RecordedOp> ops;
    std::vector<OpInfo> replay;  // ops as replayed (kReplay, pointing into `ops`)
  };
  void forward(const ForwardShape& s);
  template <class Args>
  void op(const char* name, int layer, const Args& args, std::initializer_list<int> reads,
          std::initializer_list<int> writes);
  bool graphs_enabled_ = false;
  int graph_slot(const StepInput& in, bool sampling) const;  // graphs_ index, or -1: no graph
  std::vector<Graph> graphs_;        // index: decode rows * 2 + sampling
  // OpInfo::graph_kernels of captured ops: the capture's last node after
  // each op, then the chain walked once the capture ended.
  cudaGraphNode_t capture_leaf() const;
  void count_graph_kernels(cudaGraph_t graph, std::vector<RecordedOp>& ops);
  std::vector<RecordedOp>* recording_ = nullptr;
  OpInfo::GraphMode graph_mode_ = OpInfo::kEager;
  void attention_mixed(int layer, const kernels::AttentionPrefillArgs& prefill,
                       const kernels::AttentionDecodeArgs& decode, std::initializer_list<int> reads,
                       std::initializer_list<int> writes);
  void apply_table_updates(const std::vector<KvTableUpdate>& updates);
};

}  // namespace lantern
