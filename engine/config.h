#pragma once
// ModelConfig: the shapes and constants of a Llama-family model, read from an
// HF model directory's config.json (+ generation_config.json for eos ids).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lantern {

struct RopeScaling {
  std::string type = "none";          // "none" or "llama3"
  float factor = 1.0f;                // llama3: 32 for Llama 3.2
  float low_freq_factor = 1.0f;       // llama3: 1
  float high_freq_factor = 1.0f;      // llama3: 4
  int original_max_position = 0;      // llama3: 8192
};

struct ModelConfig {
  std::string model_type = "llama";
  int hidden_size = 0;                // d_model, e.g. 2048
  int intermediate_size = 0;          // MLP width, e.g. 8192
  int num_layers = 0;                 // num_hidden_layers, e.g. 16
  int num_q_heads = 0;                // num_attention_heads, e.g. 32
  int num_kv_heads = 0;               // num_key_value_heads (GQA), e.g. 8
  int head_dim = 0;                   // explicit or hidden_size / num_q_heads, e.g. 64
  int vocab_size = 0;                 // e.g. 128256
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;        // 500000 for Llama 3
  RopeScaling rope_scaling;
  int max_position_embeddings = 0;    // context limit of the model, e.g. 131072
  bool tie_word_embeddings = false;   // LM head reuses model.embed_tokens.weight
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;     // union of config.json and generation_config.json
  std::string torch_dtype = "bfloat16";

  int q_dim() const { return num_q_heads * head_dim; }    // width of q_proj output
  int kv_dim() const { return num_kv_heads * head_dim; }  // width of k_proj / v_proj output
  int gqa_group() const { return num_q_heads / num_kv_heads; }
  bool is_eos(int id) const;

  // Parse + validate. Throws lantern::Error naming the key and value on anything
  // unsupported or inconsistent.
  static ModelConfig from_json(const nlohmann::json& config);
  // Reads DIR/config.json and, when present, DIR/generation_config.json.
  static ModelConfig load(const std::filesystem::path& model_dir);
  nlohmann::json to_json() const;  // HF-style config.json content
  void validate() const;
};

// Rotary inverse frequencies [head_dim/2] with the config's scaling applied
// (HF's _compute_llama3_parameters for "llama3"), computed in double then
// rounded to float.
std::vector<float> rope_inv_freq(const ModelConfig& cfg);

}  // namespace lantern
