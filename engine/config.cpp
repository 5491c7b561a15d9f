// ModelConfig: parsing and validation of an HF Llama config.json.
//
// Every optional key has an explicit default (HF LlamaConfig's), every
// required key is named when absent, and every value Lantern cannot run is
// rejected with the key and the value in the message.
#include "engine/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"

namespace lantern {

namespace {

using nlohmann::json;

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

const json* find_key(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t as_int(const json& v, const std::string& key) {
  if (v.is_number_integer()) return v.get<int64_t>();
  // 2048.0 is an integer too (some exporters write floats).
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  LANTERN_FAIL("config.json: %s must be an integer, got %s", key.c_str(), show(v).c_str());
}

int int_key(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  LANTERN_CHECK(it != obj.end() && !it->is_null(), "%s: missing required key %s", where.c_str(),
                key.c_str());
  int64_t x = as_int(*it, key);
  LANTERN_CHECK(x >= INT32_MIN && x <= INT32_MAX, "config.json: %s = %lld is out of range",
                key.c_str(), static_cast<long long>(x));
  return static_cast<int>(x);
}

int int_key_or(const json& obj, const std::string& key, int fallback) {
  if (!find_key(obj, key.c_str())) return fallback;
  return int_key(obj, key, "config.json");
}

double number(const json& v, const std::string& key) {
  LANTERN_CHECK(v.is_number(), "config.json: %s must be a number, got %s", key.c_str(),
                show(v).c_str());
  return v.get<double>();
}

// Narrowing to float: out-of-range doubles are an error, not undefined behaviour.
float to_float(double v, const std::string& key) {
  LANTERN_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(),
                "config.json: %s = %g is out of range", key.c_str(), v);
  return static_cast<float>(v);
}

double number_key(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  LANTERN_CHECK(it != obj.end() && !it->is_null(), "%s: missing required key %s", where.c_str(),
                key.c_str());
  return number(*it, key);
}

double number_key_or(const json& obj, const std::string& key, double fallback) {
  const json* v = find_key(obj, key.c_str());
  return v ? number(*v, key) : fallback;
}

bool bool_key_or(const json& obj, const std::string& key, bool fallback) {
  const json* v = find_key(obj, key.c_str());
  if (!v) return fallback;
  LANTERN_CHECK(v->is_boolean(), "config.json: %s must be true or false, got %s", key.c_str(),
                show(*v).c_str());
  return v->get<bool>();
}

std::string string_key_or(const json& obj, const std::string& key, const std::string& fallback) {
  const json* v = find_key(obj, key.c_str());
  if (!v) return fallback;
  LANTERN_CHECK(v->is_string(), "config.json: %s must be a string, got %s", key.c_str(),
                show(*v).c_str());
  return v->get<std::string>();
}

// bos/eos ids: an int, a list of ints, or null.
std::vector<int> token_ids(const json& obj, const std::string& key, const std::string& file) {
  std::vector<int> ids;
  const json* v = find_key(obj, key.c_str());
  if (!v) return ids;
  auto one = [&](const json& x) {
    LANTERN_CHECK(x.is_number_integer(), "%s: %s must be an integer or a list of integers, got %s",
                  file.c_str(), key.c_str(), show(*v).c_str());
    // Full range first: 4295055298 must not wrap to 88002.
    const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t{INT32_MAX}
                                             : x.get<int64_t>() >= -1 && x.get<int64_t>() <= INT32_MAX;
    LANTERN_CHECK(fits, "%s: %s %s is not a token id (ids are in [0, 2^31))", file.c_str(),
                  key.c_str(), show(x).c_str());
    ids.push_back(static_cast<int>(x.get<int64_t>()));
  };
  if (v->is_array()) {
    for (const auto& x : *v) one(x);
  } else {
    one(*v);
  }
  return ids;
}

// Shortest decimal that round-trips the float, as a double: 1e-5f is written
// as 1e-05, not 9.999999747378752e-06.
double float_for_json(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

RopeScaling parse_rope_scaling(const json& rs, const char* key) {
  RopeScaling out;
  LANTERN_CHECK(rs.is_object(), "config.json: %s must be an object or null, got %s", key,
                show(rs).c_str());
  // "rope_type" (current HF) or "type" (older exports).
  std::string type;
  if (const json* t = find_key(rs, "rope_type"))
    type = t->is_string() ? t->get<std::string>() : show(*t);
  else if (const json* t2 = find_key(rs, "type"))
    type = t2->is_string() ? t2->get<std::string>() : show(*t2);
  else
    LANTERN_FAIL("config.json: %s has no rope_type: expected \"llama3\" or \"default\"", key);
  if (type == "default") return out;
  LANTERN_CHECK(type == "llama3",
                "config.json: %s.rope_type \"%s\" is not supported (supported: llama3, default)",
                key, type.c_str());
  const std::string where = std::string("config.json ") + key;
  out.type = "llama3";
  out.factor = to_float(number_key(rs, "factor", where), "factor");
  out.low_freq_factor = to_float(number_key(rs, "low_freq_factor", where), "low_freq_factor");
  out.high_freq_factor = to_float(number_key(rs, "high_freq_factor", where), "high_freq_factor");
  out.original_max_position = int_key(rs, "original_max_position_embeddings", where);
  return out;
}

}  // namespace

bool ModelConfig::is_eos(int id) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), id) != eos_token_ids.end();
}

ModelConfig ModelConfig::from_json(const json& j) {
  LANTERN_CHECK(j.is_object(), "config.json: expected a JSON object, got %s", show(j).c_str());
  ModelConfig c;
  const std::string where = "config.json";

  c.model_type = string_key_or(j, "model_type", "");
  LANTERN_CHECK(!c.model_type.empty(), "config.json: missing required key model_type");
  LANTERN_CHECK(c.model_type == "llama",
                "config.json: model_type \"%s\" is not supported (supported: llama)",
                c.model_type.c_str());

  c.hidden_size = int_key(j, "hidden_size", where);
  c.intermediate_size = int_key(j, "intermediate_size", where);
  c.num_layers = int_key(j, "num_hidden_layers", where);
  c.num_q_heads = int_key(j, "num_attention_heads", where);
  c.vocab_size = int_key(j, "vocab_size", where);
  // HF defaults: no GQA, head_dim = hidden_size / heads.
  c.num_kv_heads = int_key_or(j, "num_key_value_heads", c.num_q_heads);
  if (find_key(j, "head_dim")) {
    c.head_dim = int_key(j, "head_dim", where);
  } else {
    LANTERN_CHECK(c.num_q_heads > 0, "config.json: num_attention_heads must be positive, got %d",
                  c.num_q_heads);
    LANTERN_CHECK(c.hidden_size % c.num_q_heads == 0,
                  "config.json: num_attention_heads %d does not divide hidden_size %d (and no "
                  "head_dim is given)",
                  c.num_q_heads, c.hidden_size);
    c.head_dim = c.hidden_size / c.num_q_heads;
  }

  c.rms_norm_eps = to_float(number_key_or(j, "rms_norm_eps", 1e-6), "rms_norm_eps");
  c.max_position_embeddings = int_key_or(j, "max_position_embeddings", 2048);
  c.tie_word_embeddings = bool_key_or(j, "tie_word_embeddings", false);

  // Rope: classic keys (rope_theta + rope_scaling), or transformers 5's
  // rope_parameters, which carries rope_theta and the scaling in one object.
  c.rope_theta = to_float(number_key_or(j, "rope_theta", 10000.0), "rope_theta");
  if (const json* rp = find_key(j, "rope_parameters")) {
    LANTERN_CHECK(rp->is_object(), "config.json: rope_parameters must be an object, got %s",
                  show(*rp).c_str());
    if (const json* t = find_key(*rp, "rope_theta"))
      c.rope_theta =
          to_float(number(*t, "rope_parameters.rope_theta"), "rope_parameters.rope_theta");
    c.rope_scaling = parse_rope_scaling(*rp, "rope_parameters");
  } else if (const json* rs = find_key(j, "rope_scaling")) {
    c.rope_scaling = parse_rope_scaling(*rs, "rope_scaling");
  }

  // transformers 5 writes "dtype"; earlier versions "torch_dtype".
  c.torch_dtype = string_key_or(j, "torch_dtype", string_key_or(j, "dtype", "bfloat16"));

  // Architecture switches Lantern does not implement: accept only the Llama values.
  std::string act = string_key_or(j, "hidden_act", "silu");
  LANTERN_CHECK(act == "silu", "config.json: hidden_act \"%s\" is not supported (supported: silu)",
                act.c_str());
  LANTERN_CHECK(!bool_key_or(j, "attention_bias", false),
                "config.json: attention_bias true is not supported (Llama has no q/k/v/o biases)");
  LANTERN_CHECK(!bool_key_or(j, "mlp_bias", false),
                "config.json: mlp_bias true is not supported (Llama has no MLP biases)");

  std::vector<int> bos = token_ids(j, "bos_token_id", where);
  LANTERN_CHECK(bos.size() <= 1, "config.json: bos_token_id must be one id, got %s",
                show(j["bos_token_id"]).c_str());
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.eos_token_ids = token_ids(j, "eos_token_id", where);

  c.validate();
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  LANTERN_CHECK(fs::exists(model_dir, ec), "model directory %s does not exist",
                model_dir.string().c_str());
  LANTERN_CHECK(fs::is_directory(model_dir, ec),
                "model path %s is a file, expected a directory holding config.json and "
                "model.safetensors",
                model_dir.string().c_str());
  auto read_json = [](const fs::path& p) { return parse_json_file(p); };
  fs::path config_path = model_dir / "config.json";
  LANTERN_CHECK(fs::is_regular_file(config_path, ec),
                "%s does not exist (not an HF model directory?)", config_path.string().c_str());
  ModelConfig c = from_json(read_json(config_path));

  fs::path gen_path = model_dir / "generation_config.json";
  if (fs::is_regular_file(gen_path, ec)) {
    json g = read_json(gen_path);
    LANTERN_CHECK(g.is_object(), "%s: expected a JSON object", gen_path.string().c_str());
    for (int id : token_ids(g, "eos_token_id", "generation_config.json")) {
      LANTERN_CHECK(id >= 0 && id < c.vocab_size,
                    "generation_config.json: eos_token_id %d is outside the vocabulary [0, %d)", id,
                    c.vocab_size);
      if (!c.is_eos(id)) c.eos_token_ids.push_back(id);
    }
    std::vector<int> bos = token_ids(g, "bos_token_id", "generation_config.json");
    if (c.bos_token_id < 0 && bos.size() == 1) c.bos_token_id = bos[0];
    c.validate();
  }
  return c;
}

json ModelConfig::to_json() const {
  json j;
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = intermediate_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["mlp_bias"] = false;
  j["model_type"] = model_type;
  j["num_attention_heads"] = num_q_heads;
  j["num_hidden_layers"] = num_layers;
  j["num_key_value_heads"] = num_kv_heads;
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = float_for_json(rms_norm_eps);
  if (rope_scaling.type == "llama3") {
    j["rope_scaling"] = {{"factor", float_for_json(rope_scaling.factor)},
                         {"high_freq_factor", float_for_json(rope_scaling.high_freq_factor)},
                         {"low_freq_factor", float_for_json(rope_scaling.low_freq_factor)},
                         {"original_max_position_embeddings", rope_scaling.original_max_position},
                         {"rope_type", "llama3"}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_theta"] = float_for_json(rope_theta);
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  j["vocab_size"] = vocab_size;
  return j;
}

void ModelConfig::validate() const {
  LANTERN_CHECK(model_type == "llama",
                "config.json: model_type \"%s\" is not supported (supported: llama)",
                model_type.c_str());
  auto positive = [](int v, const char* key) {
    LANTERN_CHECK(v > 0, "config.json: %s must be positive, got %d", key, v);
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_q_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  LANTERN_CHECK(max_position_embeddings >= 2,
                "config.json: max_position_embeddings must be >= 2 (one prompt token and one "
                "generated), got %d",
                max_position_embeddings);
  LANTERN_CHECK(num_q_heads % num_kv_heads == 0,
                "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                num_q_heads, num_kv_heads);
  LANTERN_CHECK(head_dim % 2 == 0,
                "config.json: head_dim must be even for rotary embeddings, got %d", head_dim);
  LANTERN_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
                "config.json: rms_norm_eps must be positive, got %g", double(rms_norm_eps));
  LANTERN_CHECK(std::isfinite(rope_theta) && rope_theta > 1,
                "config.json: rope_theta must be greater than 1, got %g", double(rope_theta));
  if (rope_scaling.type == "llama3") {
    const RopeScaling& s = rope_scaling;
    LANTERN_CHECK(std::isfinite(s.factor) && s.factor >= 1,
                  "config.json: rope_scaling.factor must be >= 1, got %g", double(s.factor));
    LANTERN_CHECK(s.low_freq_factor > 0,
                  "config.json: rope_scaling.low_freq_factor must be positive, got %g",
                  double(s.low_freq_factor));
    LANTERN_CHECK(s.high_freq_factor > s.low_freq_factor,
                  "config.json: rope_scaling.high_freq_factor %g must be greater than "
                  "low_freq_factor %g",
                  double(s.high_freq_factor), double(s.low_freq_factor));
    LANTERN_CHECK(
        s.original_max_position > 0,
        "config.json: rope_scaling.original_max_position_embeddings must be positive, got %d",
        s.original_max_position);
  } else {
    LANTERN_CHECK(
        rope_scaling.type == "none",
        "config.json: rope_scaling type \"%s\" is not supported (supported: llama3, none)",
        rope_scaling.type.c_str());
  }
  if (torch_dtype == "float16" || torch_dtype == "float32") {
    LANTERN_FAIL(
        "config.json: torch_dtype \"%s\" is not supported yet (Lantern runs bfloat16 "
        "weights; convert the checkpoint to bfloat16)",
        torch_dtype.c_str());
  }
  LANTERN_CHECK(torch_dtype == "bfloat16",
                "config.json: torch_dtype \"%s\" is not supported (supported: bfloat16)",
                torch_dtype.c_str());
  LANTERN_CHECK(bos_token_id == -1 || (bos_token_id >= 0 && bos_token_id < vocab_size),
                "config.json: bos_token_id %d is outside the vocabulary [0, %d)", bos_token_id,
                vocab_size);
  for (int id : eos_token_ids)
    LANTERN_CHECK(id >= 0 && id < vocab_size,
                  "config.json: eos_token_id %d is outside the vocabulary [0, %d)", id, vocab_size);
}

std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int half = cfg.head_dim / 2;
  std::vector<float> out(half);
  const RopeScaling& s = cfg.rope_scaling;
  const double low_freq_wavelen = double(s.original_max_position) / s.low_freq_factor;
  const double high_freq_wavelen = double(s.original_max_position) / s.high_freq_factor;
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(double(cfg.rope_theta), double(2 * i) / cfg.head_dim);
    if (s.type == "llama3") {
      const double wavelen = 2 * std::numbers::pi / inv;
      if (wavelen > low_freq_wavelen) {
        inv = inv / s.factor;  // low frequencies: fully interpolated
      } else if (wavelen >= high_freq_wavelen) {
        // Between the two: blend of scaled and unscaled.
        double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }  // high frequencies (wavelen < high_freq_wavelen) are kept
    }
    out[i] = static_cast<float>(inv);
  }
  return out;
}

}  // namespace lantern
