#include "engine/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "kernels/base/errors.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json base() { return test::llama32_1b_config_json(); }

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, ParsesLlama32_1B) {
  ModelConfig c = ModelConfig::from_json(base());
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.num_q_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_EQ(c.gqa_group(), 4);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_TRUE(c.is_eos(128009));
  EXPECT_FALSE(c.is_eos(128000));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(Config, DefaultsForOptionalKeys) {
  json j = base();
  for (const char* k :
       {"head_dim", "num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
        "max_position_embeddings", "tie_word_embeddings", "bos_token_id", "eos_token_id",
        "torch_dtype", "hidden_act", "attention_bias", "mlp_bias"})
    j.erase(k);
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.head_dim, 64);      // hidden_size / num_attention_heads
  EXPECT_EQ(c.num_kv_heads, 32);  // no GQA
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(Config, TokenIdsIntOrListAndExplicitHeadDim) {
  json j = base();
  j["eos_token_id"] = 128001;
  j["bos_token_id"] = json::array({128000});
  j["head_dim"] = 128;  // explicit head_dim wins over hidden / heads
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  j["hidden_size"] = 2048.0;  // integral floats are integers
  EXPECT_EQ(ModelConfig::from_json(j).hidden_size, 2048);
}

TEST(Config, RopeParametersOfTransformers5) {
  json j = base();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  // Older exports spell rope_type "type".
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(ModelConfig::from_json(j).rope_scaling.type, "llama3");
}

TEST(Config, ToJsonRoundTrips) {
  ModelConfig c = ModelConfig::from_json(base());
  json out = c.to_json();
  EXPECT_EQ(out.dump(), ModelConfig::from_json(out).to_json().dump());
  // Floats are written as their shortest decimal, as HF writes them.
  EXPECT_EQ(out["rms_norm_eps"].dump(), "1e-05");
  EXPECT_EQ(out["rope_theta"].dump(), "500000.0");
  EXPECT_EQ(out["rope_scaling"]["factor"].dump(), "32.0");
  // Every key of the published config is written with the same value.
  json pub = base();
  for (auto it = pub.begin(); it != pub.end(); ++it) {
    if (it.key() == "transformers_version") continue;
    ASSERT_TRUE(out.contains(it.key())) << it.key();
    EXPECT_EQ(out[it.key()], *it) << it.key();
  }
}

TEST(Config, RejectsMissingRequiredKeys) {
  for (const char* key : {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "vocab_size"}) {
    json j = base();
    j.erase(key);
    EXPECT_THAT(error_of(j), HasSubstr(std::string("missing required key ") + key)) << key;
  }
  json j = base();
  j["rope_scaling"].erase("factor");
  EXPECT_THAT(error_of(j), HasSubstr("config.json rope_scaling: missing required key factor"));
  j = base();
  j["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_THAT(error_of(j), HasSubstr("missing required key original_max_position_embeddings"));
}

TEST(Config, RejectsImpossibleValues) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"num_hidden_layers", 0, "num_hidden_layers must be positive, got 0"},
      {"hidden_size", -2048, "hidden_size must be positive, got -2048"},
      {"intermediate_size", 0, "intermediate_size must be positive, got 0"},
      {"vocab_size", 0, "vocab_size must be positive, got 0"},
      {"num_key_value_heads", 0, "num_key_value_heads must be positive, got 0"},
      {"num_key_value_heads", 6,
       "num_attention_heads 32 is not a multiple of num_key_value_heads 6"},
      {"head_dim", 63, "head_dim must be even for rotary embeddings, got 63"},
      {"head_dim", 0, "head_dim must be positive, got 0"},
      {"rms_norm_eps", 0.0, "rms_norm_eps must be positive, got 0"},
      {"rms_norm_eps", -1e-5, "rms_norm_eps must be positive"},
      {"rope_theta", 0.0, "rope_theta must be greater than 1, got 0"},
      {"max_position_embeddings", 0, "max_position_embeddings must be >= 2 (one prompt token and one generated), got 0"},
      {"model_type", "mistral", "model_type \"mistral\" is not supported (supported: llama)"},
      {"torch_dtype", "float16", "torch_dtype \"float16\" is not supported yet"},
      {"torch_dtype", "float32", "torch_dtype \"float32\" is not supported yet"},
      {"torch_dtype", "int8", "torch_dtype \"int8\" is not supported (supported: bfloat16)"},
      {"hidden_act", "gelu", "hidden_act \"gelu\" is not supported (supported: silu)"},
      {"attention_bias", true, "attention_bias true is not supported"},
      {"mlp_bias", true, "mlp_bias true is not supported"},
      {"hidden_size", "2048", "hidden_size must be an integer, got \"2048\""},
      {"num_hidden_layers", 1.5, "num_hidden_layers must be an integer, got 1.5"},
      {"rms_norm_eps", "1e-5", "rms_norm_eps must be a number, got \"1e-5\""},
      {"tie_word_embeddings", 1, "tie_word_embeddings must be true or false, got 1"},
      {"eos_token_id", 200000, "eos_token_id 200000 is outside the vocabulary [0, 128256)"},
      {"eos_token_id", "x", "eos_token_id must be an integer or a list of integers"},
      {"bos_token_id", json::array({1, 2}), "bos_token_id must be one id"},
      {"rope_scaling", 5, "rope_scaling must be an object or null, got 5"},
      {"rms_norm_eps", 1e300, "rms_norm_eps = 1e+300 is out of range"},
      // Hostile-input probe (issue 15): full-range integers, no 32-bit wrap.
      {"eos_token_id", 4295055298ull, "eos_token_id 4295055298 is not a token id"},
      {"eos_token_id", -2, "eos_token_id -2 is not a token id"},
      {"bos_token_id", 200000, "bos_token_id 200000 is outside the vocabulary [0, 128256)"},
      {"bos_token_id", 4294967297ull, "bos_token_id 4294967297 is not a token id"},
      {"max_position_embeddings", 1, "max_position_embeddings must be >= 2"},
      {"hidden_size", 4294969344ull, "hidden_size = 4294969344 is out of range"},
  };
  for (const auto& c : cases) {
    json j = base();
    j[c.key] = c.value;
    EXPECT_THAT(error_of(j), HasSubstr(c.message)) << c.key << " = " << c.value.dump();
  }
}

TEST(Config, RejectsHeadsNotDividingHidden) {
  json j = base();
  j.erase("head_dim");
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 1;
  EXPECT_THAT(error_of(j), HasSubstr("num_attention_heads 3 does not divide hidden_size 2048"));
  j["num_attention_heads"] = 0;
  EXPECT_THAT(error_of(j), HasSubstr("num_attention_heads must be positive, got 0"));
}

TEST(Config, RejectsUnsupportedRopeScaling) {
  json j = base();
  j["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_THAT(error_of(j), HasSubstr("rope_scaling.rope_type \"yarn\" is not supported"));
  j["rope_scaling"].erase("rope_type");
  EXPECT_THAT(error_of(j), HasSubstr("rope_scaling has no rope_type"));
  j = base();
  j["rope_scaling"]["high_freq_factor"] = 1.0;
  EXPECT_THAT(error_of(j), HasSubstr("high_freq_factor 1 must be greater than low_freq_factor 1"));
  j = base();
  j["rope_scaling"]["factor"] = 0.5;
  EXPECT_THAT(error_of(j), HasSubstr("rope_scaling.factor must be >= 1, got 0.5"));
  // null means none.
  j = base();
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j).rope_scaling.type, "none");
}

// --- loading a directory ---

std::string load_error(const std::filesystem::path& dir) {
  try {
    ModelConfig::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

TEST(Config, LoadMergesGenerationConfigEos) {
  auto dir = test::scratch_dir("config_load");
  json j = base();
  j["eos_token_id"] = 128001;
  write(dir / "config.json", j.dump());
  write(dir / "generation_config.json",
        R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": true})");
  ModelConfig c = ModelConfig::load(dir);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  std::filesystem::remove(dir / "generation_config.json");
  EXPECT_EQ(ModelConfig::load(dir).eos_token_ids, std::vector<int>{128001});
}

TEST(Config, LoadRejectsBadPaths) {
  auto dir = test::scratch_dir("config_paths");
  EXPECT_THAT(load_error(dir / "nope"),
              HasSubstr("model directory " + (dir / "nope").string() + " does not exist"));
  write(dir / "file", "x");
  EXPECT_THAT(load_error(dir / "file"), HasSubstr("is a file, expected a directory"));
  EXPECT_THAT(load_error(dir), HasSubstr("config.json does not exist"));
  write(dir / "config.json", "{\"model_type\": \"llama\",");
  EXPECT_THAT(load_error(dir), HasSubstr("config.json is not valid JSON"));
  write(dir / "config.json", base().dump());
  write(dir / "generation_config.json", "[1");
  EXPECT_THAT(load_error(dir), HasSubstr("generation_config.json is not valid JSON"));
  write(dir / "generation_config.json", R"({"eos_token_id": 999999})");
  EXPECT_THAT(load_error(dir),
              HasSubstr("generation_config.json: eos_token_id 999999 is outside the vocabulary"));
}

// --- rotary frequencies ---

TEST(RopeInvFreq, Llama3ScalingAtKnownPoints) {
  ModelConfig c = ModelConfig::from_json(base());
  std::vector<float> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 32u);
  // Values of HF's _compute_llama3_parameters (float64) for theta 500000,
  // head_dim 64, factor 32, low 1, high 4, original 8192.
  const std::pair<int, double> known[] = {
      {0, 1.0},                      // wavelen 6.3: kept
      {14, 0.0032114459947525913},   // wavelen 1956 < 2048: kept
      {15, 0.001290547928209264},    // wavelen 2948: interpolated
      {16, 0.00042955679655936815},  // wavelen 4443: interpolated
      {17, 9.70828780262767e-05},    // wavelen 6695: interpolated
      {18, 1.9461638184831125e-05},  // wavelen 10089 > 8192: divided by 32
      {31, 9.418306725434909e-08}};
  for (auto [i, v] : known) EXPECT_NEAR(f[i], v, v * 1e-6) << "i=" << i;
}

TEST(RopeInvFreq, MatchesIndependentFormula) {
  // Independent restatement: scale each frequency by 1 / s(wavelen), where
  // s = 1 for short wavelengths, factor for long, and 1 / s interpolates
  // linearly in (original / wavelen) between them.
  for (float factor : {8.0f, 32.0f}) {
    ModelConfig c = ModelConfig::from_json(base());
    c.rope_scaling.factor = factor;
    c.head_dim = 128;
    std::vector<float> f = rope_inv_freq(c);
    for (int i = 0; i < 64; ++i) {
      double base_freq = std::exp(-std::log(500000.0) * (2.0 * i) / 128.0);
      double ratio = 8192.0 * base_freq / (2 * std::numbers::pi);  // original / wavelen
      double t = std::clamp((ratio - 1.0) / (4.0 - 1.0), 0.0, 1.0);
      double expected = base_freq * ((1 - t) / factor + t);
      EXPECT_NEAR(f[i], expected, expected * 2e-6) << "factor " << factor << " i=" << i;
    }
  }
  // Without scaling: theta^(-2i/d).
  ModelConfig c = ModelConfig::from_json(base());
  c.rope_scaling = RopeScaling{};
  std::vector<float> f = rope_inv_freq(c);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f[i], std::pow(500000.0, -i / 32.0), 1e-6 * f[i]);
}

}  // namespace
}  // namespace lantern
