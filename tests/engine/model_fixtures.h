#pragma once
// Model-file fixtures shared by the config, safetensors, synth and weights
// tests: the published config.json of Llama-3.2-1B-Instruct and a builder for
// tiny configurations that write in microseconds.
#include <nlohmann/json.hpp>

#include "engine/config.h"

namespace lantern::test {

// The published config.json of Llama-3.2-1B-Instruct, key by key.
inline nlohmann::json llama32_1b_config_json() {
  return nlohmann::json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// A validated tiny configuration: 2 layers, 128 positions.
struct MicroShape {
  int hidden = 16, intermediate = 32, q_heads = 2, kv_heads = 1, head_dim = 8, vocab = 64;
  bool tied = true;
};

inline ModelConfig micro_config(const MicroShape& s) {
  ModelConfig c;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_layers = 2;
  c.num_q_heads = s.q_heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.vocab_size = s.vocab;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = s.tied;
  c.validate();
  return c;
}

}  // namespace lantern::test
