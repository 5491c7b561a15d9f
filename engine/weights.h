#pragma once
// Weights: every weight byte of the model in ONE allocation (host memory for
// the CPU backend, one cudaMalloc for CUDA), uploaded once; tensors are views
// (byte ranges) into that block, found through a table derived from the
// config (tied embeddings: the LM head is model.embed_tokens.weight).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/tensor_parallel.h"
#include "kernels/registry.h"

namespace lantern {

// What a tensor is for; with TensorSpec::layer it locates the tensor without
// parsing its name.
enum class TensorRole : uint8_t {
  embed, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, final_norm, lm_head
};

// One tensor the model needs, as the config says it must look.
struct TensorSpec {
  std::string name;             // HF name, e.g. "model.layers.3.mlp.up_proj.weight"
  std::vector<int64_t> shape;   // e.g. {8192, 2048}
  std::string dtype = "BF16";   // safetensors dtype string
  TensorRole role = TensorRole::embed;
  int layer = -1;               // decoder layer index; -1 for embed / final_norm / lm_head
  size_t bytes() const;
};

// Every tensor in the weight block starts at a multiple of this many bytes.
constexpr size_t kWeightAlign = 256;

// The tensor table derived from the config (not from strings scattered through
// the code). Tied embeddings: no lm_head.weight entry.
std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg);

struct WeightView {
  std::string name;
  size_t offset = 0;  // inside the weight block
  size_t bytes = 0;
  std::vector<int64_t> shape;  // as held: a tensor-parallel rank's slice when sharded
};

struct LayerWeights {            // pointers into the block (device or host), bf16
  const void* attn_norm = nullptr;  // [hidden]
  const void* wq = nullptr;         // [q_dim, hidden]
  const void* wk = nullptr;         // [kv_dim, hidden]
  const void* wv = nullptr;         // [kv_dim, hidden]
  const void* wo = nullptr;         // [hidden, q_dim]
  const void* mlp_norm = nullptr;   // [hidden]
  const void* w_gate = nullptr;     // [inter, hidden]
  const void* w_up = nullptr;       // [inter, hidden]
  const void* w_down = nullptr;     // [hidden, inter]
  // Fused views over the same bytes (no copy): the loader lays wq, wk, wv out
  // back to back, and w_gate, w_up, so [wq; wk; wv] IS the fused q/k/v matrix
  // and [w_gate; w_up] the fused gate/up matrix. nullptr when the tensors are
  // not adjacent (a size that is not a multiple of kWeightAlign leaves a gap):
  // the engine then runs the unfused ops.
  const void* wqkv = nullptr;       // [q_dim + 2 * kv_dim, hidden]
  const void* w_gate_up = nullptr;  // [2 * inter, hidden]
};

struct WeightLoadStats {
  size_t bytes = 0;          // weight payload uploaded
  double read_seconds = 0;   // file -> host staging
  double total_seconds = 0;  // open to last byte on the device
  double gb_per_s() const { return total_seconds > 0 ? bytes / total_seconds / 1e9 : 0; }
};

class Weights {
 public:
  // Validates the safetensors files (single or sharded) against the config,
  // then reads every tensor into one allocation on `backend`. Host memory
  // stays small on CUDA (chunked, pipelined staging through pinned buffers).
  // `progress` (may be empty) is called with (bytes done, bytes total).
  // cuda: the block lives on GPU `gpu` (made current for the calling thread).
  // `shard`: read only this tensor-parallel rank's slice of each split tensor
  // (tensor_parallel.h); `cfg` is the full model's config either way.
  static Weights load(const ModelConfig& cfg, const std::filesystem::path& model_dir,
                      kernels::Backend backend,
                      const std::function<void(size_t, size_t)>& progress = {}, int gpu = 0,
                      const ShardSpec& shard = {});

  Weights() = default;
  Weights(Weights&&) noexcept;
  Weights& operator=(Weights&&) noexcept;
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;
  ~Weights();

  const void* embed = nullptr;       // [vocab, hidden]
  const void* final_norm = nullptr;  // [hidden]
  // [vocab, hidden] (== embed when tied); with a split LM head (shard) this
  // rank's [vocab / world, hidden] rows (tied: embed + its first row).
  const void* lm_head = nullptr;
  std::vector<LayerWeights> layers;

  kernels::Backend backend() const { return backend_; }
  int gpu() const { return gpu_; }  // cuda: the device index holding the block
  void* block() const { return block_; }
  size_t bytes() const { return bytes_; }
  const std::vector<WeightView>& views() const { return views_; }
  // The fused matrices (qkv_proj, gate_up_proj per layer) as views over the
  // per-tensor views above: same bytes, for the memory map.
  const std::vector<WeightView>& fused_views() const { return fused_views_; }
  // True when every layer has both fused views (LayerWeights::wqkv, w_gate_up).
  bool fusable() const;
  const WeightLoadStats& stats() const { return stats_; }
  const ShardSpec& shard() const { return shard_; }  // what load() was asked to hold
  const void* find(const std::string& name) const;  // throws if absent

 private:
  kernels::Backend backend_ = kernels::Backend::cpu;
  int gpu_ = 0;
  void* block_ = nullptr;
  size_t bytes_ = 0;
  std::vector<WeightView> views_;
  std::vector<WeightView> fused_views_;
  WeightLoadStats stats_;
  ShardSpec shard_;
  void release();
  void bind(const ModelConfig& cfg);  // sets embed/layers/... from views_
  void bind_fused();                  // sets wqkv / w_gate_up and fused_views_ where adjacent
  friend struct WeightsLoader;
};

}  // namespace lantern
