// Weights: the tensor table derived from the config, and the views bound
// into the one block the loader filled (engine/weights.cpp): the per-layer
// pointers, the tied or split LM head, and the fused q/k/v and gate/up views.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cuda_runtime_api.h>

#include "engine/safetensors.h"
#include "engine/weights.h"
#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"

namespace lantern {

namespace {

// HF names, one place. Layer tensors are "model.layers.<i>." + suffix.
struct RoleName {
  TensorRole role;
  const char* name;
};
constexpr RoleName kLayerTensors[] = {
    {TensorRole::attn_norm, "input_layernorm.weight"},
    {TensorRole::wq, "self_attn.q_proj.weight"},
    {TensorRole::wk, "self_attn.k_proj.weight"},
    {TensorRole::wv, "self_attn.v_proj.weight"},
    {TensorRole::wo, "self_attn.o_proj.weight"},
    {TensorRole::mlp_norm, "post_attention_layernorm.weight"},
    {TensorRole::w_gate, "mlp.gate_proj.weight"},
    {TensorRole::w_up, "mlp.up_proj.weight"},
    {TensorRole::w_down, "mlp.down_proj.weight"},
};

}  // namespace

size_t TensorSpec::bytes() const {
  size_t n = safetensors_dtype_bytes(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg) {
  const int64_t hidden = cfg.hidden_size, inter = cfg.intermediate_size;
  const int64_t q_dim = cfg.q_dim(), kv_dim = cfg.kv_dim(), vocab = cfg.vocab_size;
  auto layer_shape = [&](TensorRole r) -> std::vector<int64_t> {
    switch (r) {
      case TensorRole::attn_norm:
      case TensorRole::mlp_norm:
        return {hidden};
      case TensorRole::wq:
        return {q_dim, hidden};
      case TensorRole::wk:
      case TensorRole::wv:
        return {kv_dim, hidden};
      case TensorRole::wo:
        return {hidden, q_dim};
      case TensorRole::w_gate:
      case TensorRole::w_up:
        return {inter, hidden};
      case TensorRole::w_down:
        return {hidden, inter};
      default:
        LANTERN_ASSERT(false, "not a layer tensor role %d", static_cast<int>(r));
    }
  };
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {vocab, hidden}, "BF16", TensorRole::embed, -1});
  for (int l = 0; l < cfg.num_layers; ++l)
    for (const auto& rn : kLayerTensors)
      t.push_back({"model.layers." + std::to_string(l) + "." + rn.name, layer_shape(rn.role),
                   "BF16", rn.role, l});
  t.push_back({"model.norm.weight", {hidden}, "BF16", TensorRole::final_norm, -1});
  if (!cfg.tie_word_embeddings)
    t.push_back({"lm_head.weight", {vocab, hidden}, "BF16", TensorRole::lm_head, -1});
  return t;
}

// Friend of Weights: fills its private members. load() reads as its steps:
// check the tensor table, lay the views out in one block, plan the reads,

Weights::Weights(Weights&& o) noexcept {
  *this = std::move(o);
}

Weights& Weights::operator=(Weights&& o) noexcept {
  if (this == &o) return *this;
  release();
  embed = o.embed;
  final_norm = o.final_norm;
  lm_head = o.lm_head;
  layers = std::move(o.layers);
  backend_ = o.backend_;
  gpu_ = o.gpu_;
  block_ = o.block_;
  bytes_ = o.bytes_;
  views_ = std::move(o.views_);
  fused_views_ = std::move(o.fused_views_);
  stats_ = o.stats_;
  shard_ = o.shard_;
  o.block_ = nullptr;
  o.bytes_ = 0;
  o.embed = o.final_norm = o.lm_head = nullptr;
  o.layers.clear();
  o.views_.clear();
  o.fused_views_.clear();
  return *this;
}

Weights::~Weights() {
  release();
}

void Weights::release() {
  if (!block_) return;
  if (backend_ == kernels::Backend::cpu)
    std::free(block_);
  else
    CUDA_CHECK_LOG(cudaFree(block_));
  block_ = nullptr;
  bytes_ = 0;
  embed = final_norm = lm_head = nullptr;
  layers.clear();
  views_.clear();
  fused_views_.clear();
}

void Weights::bind(const ModelConfig& cfg) {
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  LANTERN_ASSERT(specs.size() == views_.size(), "%zu views for %zu tensors", views_.size(),
                 specs.size());
  layers.assign(cfg.num_layers, LayerWeights{});
  const char* base = static_cast<const char*>(block_);
  for (size_t i = 0; i < specs.size(); ++i) {
    const void* p = base + views_[i].offset;
    const TensorSpec& s = specs[i];
    LayerWeights* lw = s.layer >= 0 ? &layers[s.layer] : nullptr;
    switch (s.role) {
      case TensorRole::embed:
        embed = p;
        break;
      case TensorRole::final_norm:
        final_norm = p;
        break;
      case TensorRole::lm_head:
        lm_head = p;
        break;
      case TensorRole::attn_norm:
        lw->attn_norm = p;
        break;
      case TensorRole::wq:
        lw->wq = p;
        break;
      case TensorRole::wk:
        lw->wk = p;
        break;
      case TensorRole::wv:
        lw->wv = p;
        break;
      case TensorRole::wo:
        lw->wo = p;
        break;
      case TensorRole::mlp_norm:
        lw->mlp_norm = p;
        break;
      case TensorRole::w_gate:
        lw->w_gate = p;
        break;
      case TensorRole::w_up:
        lw->w_up = p;
        break;
      case TensorRole::w_down:
        lw->w_down = p;
        break;
    }
  }
  // Tied: the LM head is the embedding matrix; split, this rank's vocabulary
  // rows of it (a view, no copy: the embedding itself stays replicated).
  if (cfg.tie_word_embeddings)
    lm_head = static_cast<const char*>(embed) +
              (shard_.split_lm_head() ? static_cast<size_t>(shard_.rank) * (cfg.vocab_size / shard_.world) *
                                            cfg.hidden_size * 2
                                      : 0);
  bind_fused();
}

void Weights::bind_fused() {
  // Views of one layer's tensors, by role; a fused view exists when its parts
  // follow each other with no gap (same bytes, no copy).
  const char* base = static_cast<const char*>(block_);
  auto fuse = [&](const std::vector<const WeightView*>& parts, const std::string& name) -> const void* {
    for (size_t i = 1; i < parts.size(); ++i)
      if (parts[i]->offset != parts[i - 1]->offset + parts[i - 1]->bytes) return nullptr;
    WeightView f{name, parts[0]->offset, 0, {0, parts[0]->shape.back()}};
    for (const WeightView* p : parts) {
      f.bytes += p->bytes;
      f.shape[0] += p->shape[0];
    }
    fused_views_.push_back(f);
    return base + f.offset;
  };
  std::vector<std::array<const WeightView*, 5>> by_layer(layers.size());  // wq wk wv gate up
  for (const WeightView& v : views_) {
    int layer = -1;
    char role[64] = {};
    if (std::sscanf(v.name.c_str(), "model.layers.%d.%63s", &layer, role) != 2 || layer < 0 ||
        layer >= static_cast<int>(layers.size()))
      continue;
    const std::string r = role;
    const int slot = r == "self_attn.q_proj.weight"   ? 0
                     : r == "self_attn.k_proj.weight" ? 1
                     : r == "self_attn.v_proj.weight" ? 2
                     : r == "mlp.gate_proj.weight"    ? 3
                     : r == "mlp.up_proj.weight"      ? 4
                                                      : -1;
    if (slot >= 0) by_layer[layer][slot] = &v;
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& t = by_layer[l];
    if (!t[0] || !t[1] || !t[2] || !t[3] || !t[4]) continue;
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    layers[l].wqkv = fuse({t[0], t[1], t[2]}, prefix + "self_attn.qkv_proj.weight (fused view)");
    layers[l].w_gate_up = fuse({t[3], t[4]}, prefix + "mlp.gate_up_proj.weight (fused view)");
  }
}

bool Weights::fusable() const {
  if (layers.empty()) return false;
  for (const LayerWeights& l : layers)
    if (!l.wqkv || !l.w_gate_up) return false;
  return true;
}

const void* Weights::find(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return static_cast<const char*>(block_) + v.offset;
  LANTERN_FAIL("no weight tensor named %s", name.c_str());
}


}  // namespace lantern
