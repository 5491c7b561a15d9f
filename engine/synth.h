#pragma once
// Synthetic models: a complete HF model directory (config.json,
// generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json) with seeded random bf16 weights of the exact shapes
// of a preset, for machines where the real (gated) weights are unavailable.
//
// Every element is a pure function of (seed, tensor name, element index)
// (counter-based RNG), so the file is byte-identical for a seed no matter how
// many threads write it. The initialisation is documented, with measured
// logit statistics, in docs/synthetic-models.md.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kernels/base/bf16.h"
#include "engine/config.h"
#include "engine/weights.h"

namespace lantern {

// Preset names: "tiny", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b".
const std::vector<std::string>& synth_preset_names();
// The preset's config (the real model's values for the llama presets).
// Throws naming the valid presets.
ModelConfig synth_preset(const std::string& name);

// How weights are drawn (approximately normal; see docs/synthetic-models.md).
struct SynthInit {
  double linear_gain = 1.0;  // projection weights: std = linear_gain / sqrt(fan_in)
  double norm_noise = 0.1;   // RMSNorm weights: 1 + norm_noise * z
  double logit_std = 3.0;    // embed / lm_head: std = logit_std / sqrt(hidden)
};

struct TensorInit {
  double mean = 0;
  double std = 0;
};
TensorInit synth_tensor_init(const TensorSpec& spec, const ModelConfig& cfg, const SynthInit& init);

// Key of a tensor's random stream: a hash of (seed, name).
uint64_t synth_tensor_key(uint64_t seed, const std::string& name);
// Element i of a tensor: mean + std * z, z the centred, unit-variance sum of
// four uniform 16-bit integers drawn from splitmix64(key + i * golden).
bf16_bits synth_element(uint64_t key, uint64_t i, const TensorInit& init);

struct SynthOptions {
  uint64_t seed = 0;
  std::filesystem::path tokenizer_dir;  // empty: third_party/npm/llama3 of the source tree or cwd
  bool with_tokenizer = true;           // false: weights and configs only
  int threads = 0;                      // 0: one per hardware thread
  SynthInit init;
};

struct SynthResult {
  uint64_t payload_bytes = 0;  // sum of tensor bytes (the weight payload)
  uint64_t file_bytes = 0;     // model.safetensors size
  double seconds = 0;          // whole directory
};

// Writes the whole model directory (created if needed).
SynthResult write_synthetic_model(const ModelConfig& cfg, const std::filesystem::path& out_dir,
                                  const SynthOptions& opts);
// Writes only a model.safetensors-format file with the config's tensors,
// sorted by name as HF's writer does.
SynthResult write_synthetic_weights(const ModelConfig& cfg, const std::filesystem::path& file,
                                    const SynthOptions& opts);

// generation_config.json of a config (bos, eos ids, Llama 3's sampling defaults).
nlohmann::json generation_config_json(const ModelConfig& cfg);

// The folder holding tokenizer.json and tokenizer_config.json: `explicit_dir`
// when given, else the default places; throws telling to run scripts/setup.sh.
std::filesystem::path find_tokenizer_dir(const std::filesystem::path& explicit_dir = {});

}  // namespace lantern
