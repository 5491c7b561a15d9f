#include "engine/synth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/base/errors.h"
#include "engine/safetensors.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

ModelConfig micro_config() {
  return test::micro_config({.hidden = 32, .intermediate = 64, .q_heads = 4, .kv_heads = 2,
                             .head_dim = 8, .vocab = 1000, .tied = false});
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

uint64_t payload_bytes(const ModelConfig& cfg) {
  uint64_t n = 0;
  for (const auto& s : expected_tensors(cfg)) n += s.bytes();
  return n;
}

// Removes a scratch directory however the test ends (the 1B model is 2.5 GB).
struct RemoveOnExit {
  fs::path dir;
  ~RemoveOnExit() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

TEST(Synth, PresetsHaveTheRealShapes) {
  // Published config.json of Llama-3.2-1B-Instruct, key by key (less the
  // transformers version, which a synthesised model does not claim).
  json real_1b = test::llama32_1b_config_json();
  real_1b.erase("transformers_version");
  EXPECT_EQ(synth_preset("llama-3.2-1b").to_json(), real_1b);

  const ModelConfig c3 = synth_preset("llama-3.2-3b");
  EXPECT_EQ(c3.hidden_size, 3072);
  EXPECT_EQ(c3.intermediate_size, 8192);
  EXPECT_EQ(c3.num_layers, 28);
  EXPECT_EQ(c3.num_q_heads, 24);
  EXPECT_EQ(c3.num_kv_heads, 8);
  EXPECT_EQ(c3.head_dim, 128);
  EXPECT_TRUE(c3.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c3.rope_scaling.factor, 32.0f);

  const ModelConfig c8 = synth_preset("llama-3.1-8b");
  EXPECT_EQ(c8.hidden_size, 4096);
  EXPECT_EQ(c8.intermediate_size, 14336);
  EXPECT_EQ(c8.num_layers, 32);
  EXPECT_EQ(c8.num_q_heads, 32);
  EXPECT_EQ(c8.num_kv_heads, 8);
  EXPECT_EQ(c8.head_dim, 128);
  EXPECT_FALSE(c8.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c8.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c8.rope_theta, 500000.0f);

  const ModelConfig tiny = synth_preset("tiny");
  EXPECT_EQ(tiny.vocab_size, 128256);  // the real tokenizer's vocabulary
  EXPECT_EQ(tiny.rope_scaling.type, "llama3");
  EXPECT_TRUE(tiny.tie_word_embeddings);
  EXPECT_NE(tiny.num_q_heads, tiny.num_kv_heads);  // GQA exercised

  EXPECT_EQ(payload_bytes(synth_preset("llama-3.2-1b")), 2'471'628'800u);
  EXPECT_EQ(payload_bytes(synth_preset("llama-3.2-3b")), 6'425'499'648u);
  EXPECT_EQ(payload_bytes(synth_preset("llama-3.1-8b")), 16'060'522'496u);
  EXPECT_EQ(payload_bytes(tiny), 33'424'640u);

  EXPECT_THAT(error_of([] { synth_preset("llama-4"); }),
              HasSubstr("unknown synth preset 'llama-4': valid presets are tiny, llama-3.2-1b, "
                        "llama-3.2-3b, llama-3.1-8b"));
}

TEST(Synth, InitScalesAndDistribution) {
  const ModelConfig cfg = synth_preset("llama-3.2-1b");
  const SynthInit init;
  for (const auto& spec : expected_tensors(cfg)) {
    if (spec.layer > 0) break;
    const TensorInit ti = synth_tensor_init(spec, cfg, init);
    double expected_std = spec.role == TensorRole::attn_norm || spec.role == TensorRole::mlp_norm
                              ? 0.1
                          : spec.role == TensorRole::embed ? 3.0 / std::sqrt(2048.0)
                                                           : 1.0 / std::sqrt(double(spec.shape[1]));
    EXPECT_NEAR(ti.std, expected_std, 1e-12) << spec.name;
    // Sample statistics of the generated bf16 values.
    const uint64_t key = synth_tensor_key(1234, spec.name);
    const int n = 200000;
    double sum = 0, sum2 = 0, max_z = 0;
    for (int i = 0; i < n; ++i) {
      double v = bf16_to_float(synth_element(key, i, ti));
      sum += v;
      sum2 += v * v;
      max_z = std::max(max_z, std::fabs(v - ti.mean) / ti.std);
    }
    double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
    EXPECT_NEAR(mean, ti.mean, 0.01 * ti.std) << spec.name;
    EXPECT_NEAR(sd, ti.std, 0.01 * ti.std) << spec.name;
    EXPECT_GT(max_z, 3.0) << spec.name;  // bell-shaped, not uniform (uniform stops at 1.73)
    EXPECT_LT(max_z, 3.5) << spec.name;  // bounded: no outliers
  }
  // Streams differ between tensors and seeds.
  TensorInit unit{0, 1};
  EXPECT_NE(synth_element(synth_tensor_key(1, "a"), 0, unit),
            synth_element(synth_tensor_key(1, "b"), 0, unit));
  EXPECT_NE(synth_element(synth_tensor_key(1, "a"), 0, unit),
            synth_element(synth_tensor_key(2, "a"), 0, unit));
}

TEST(Synth, SameSeedSameBytesAnyThreadCount) {
  auto dir = test::scratch_dir("synth_seed");
  const ModelConfig cfg = micro_config();
  SynthOptions a;
  a.seed = 42;
  a.threads = 1;
  SynthOptions b = a;
  b.threads = 3;
  SynthOptions c = a;
  c.seed = 43;
  SynthResult ra = write_synthetic_weights(cfg, dir / "a.safetensors", a);
  write_synthetic_weights(cfg, dir / "b.safetensors", b);
  write_synthetic_weights(cfg, dir / "c.safetensors", c);
  EXPECT_EQ(ra.payload_bytes, payload_bytes(cfg));
  EXPECT_EQ(ra.file_bytes, fs::file_size(dir / "a.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "a.safetensors.partial"));
  const std::string fa = slurp(dir / "a.safetensors"), fb = slurp(dir / "b.safetensors"),
                    fc = slurp(dir / "c.safetensors");
  EXPECT_EQ(fa, fb);
  ASSERT_EQ(fa.size(), fc.size());
  EXPECT_NE(fa, fc);
  // A different seed changes every tensor, not just some.
  SafetensorsFile h = read_safetensors_header(dir / "a.safetensors");
  for (const auto& t : h.tensors)
    EXPECT_NE(fa.substr(t.begin, t.bytes()), fc.substr(t.begin, t.bytes())) << t.name;
  // Tensors are stored sorted by name, as HF's writer stores them.
  for (size_t i = 1; i < h.tensors.size(); ++i) EXPECT_LT(h.tensors[i - 1].name, h.tensors[i].name);
}

TEST(Synth, TinyPresetIsACompleteModelDirectory) {
  RemoveOnExit cleanup{test::scratch_dir("synth_tiny")};  // 3 x 42 MB
  const fs::path& dir = cleanup.dir;
  const ModelConfig tiny = synth_preset("tiny");
  SynthOptions opts;
  opts.seed = 3;
  SynthResult r = write_synthetic_model(tiny, dir / "a", opts);
  EXPECT_EQ(r.payload_bytes, payload_bytes(tiny));
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::is_regular_file(dir / "a" / f)) << f;
  const fs::path tok = find_tokenizer_dir();
  EXPECT_EQ(slurp(dir / "a/tokenizer.json"), slurp(tok / "tokenizer.json"));
  EXPECT_EQ(slurp(dir / "a/tokenizer_config.json"), slurp(tok / "tokenizer_config.json"));

  // The directory loads back to the same config and validates.
  const ModelConfig loaded = ModelConfig::load(dir / "a");
  EXPECT_EQ(loaded.to_json(), tiny.to_json());
  EXPECT_EQ(loaded.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  json gen = json::parse(slurp(dir / "a/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 128000);
  Weights w = Weights::load(loaded, dir / "a", kernels::Backend::cpu);
  EXPECT_EQ(w.stats().bytes, r.payload_bytes);
  const SafetensorsModel m = open_safetensors_model(dir / "a");
  const std::string file = slurp(dir / "a/model.safetensors");
  for (const auto& v : w.views()) {
    const SafetensorsEntry* e = m.find(v.name);
    ASSERT_NE(e, nullptr) << v.name;
    EXPECT_EQ(std::memcmp(static_cast<const char*>(w.block()) + v.offset, file.data() + e->begin,
                          v.bytes),
              0)
        << v.name;
  }

  // Same seed: every file byte-identical. Another seed: other weights, same configs.
  write_synthetic_model(tiny, dir / "b", opts);
  opts.seed = 4;
  write_synthetic_model(tiny, dir / "c", opts);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(slurp(dir / "a" / f), slurp(dir / "b" / f)) << f;
    if (std::string(f) == "model.safetensors")
      EXPECT_NE(slurp(dir / "a" / f), slurp(dir / "c" / f));
    else
      EXPECT_EQ(slurp(dir / "a" / f), slurp(dir / "c" / f)) << f;
  }
}

TEST(Synth, OutputAndTokenizerErrors) {
  auto dir = test::scratch_dir("synth_errors");
  std::ofstream(dir / "file") << "x";
  SynthOptions opts;
  opts.with_tokenizer = false;
  EXPECT_THAT(
      error_of([&] { write_synthetic_model(micro_config(), dir / "file", opts); }),
      HasSubstr("output path " + (dir / "file").string() + " exists and is not a directory"));
  opts.with_tokenizer = true;
  opts.tokenizer_dir = dir;
  EXPECT_THAT(error_of([&] { write_synthetic_model(micro_config(), dir / "out", opts); }),
              HasSubstr("tokenizer directory " + dir.string() +
                        " does not hold tokenizer.json and tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(dir / "out/model.safetensors"));  // failed before writing weights
  ModelConfig bad = micro_config();
  bad.num_layers = 0;
  EXPECT_THAT(
      error_of([&] { write_synthetic_weights(bad, dir / "x.safetensors", SynthOptions{}); }),
      HasSubstr("num_hidden_layers must be positive, got 0"));
  // A stale shard index would shadow the new file: it is removed.
  fs::create_directories(dir / "stale");
  std::ofstream(dir / "stale/model.safetensors.index.json") << "{}";
  opts.with_tokenizer = false;
  write_synthetic_model(micro_config(), dir / "stale", opts);
  EXPECT_FALSE(fs::exists(dir / "stale/model.safetensors.index.json"));
  EXPECT_NO_THROW(Weights::load(micro_config(), dir / "stale", kernels::Backend::cpu));
}

// The done-criterion: the 1B preset's 2,471,628,800-byte payload is
// written and validated by the loader. Writes 2.5 GB; removed afterwards.
TEST(Synth, Llama32_1BPayloadValidates) {
  RemoveOnExit cleanup{test::scratch_dir("synth_1b")};
  const fs::path dir = cleanup.dir / "llama-3.2-1b";
  SynthOptions opts;
  opts.seed = 11;
  SynthResult r = write_synthetic_model(synth_preset("llama-3.2-1b"), dir, opts);
  std::fprintf(stderr, "[synth] llama-3.2-1b: %llu bytes in %.2f s\n",
               static_cast<unsigned long long>(r.file_bytes), r.seconds);
  EXPECT_EQ(r.payload_bytes, 2'471'628'800u);

  const ModelConfig cfg = ModelConfig::load(dir);
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu, [](size_t, size_t) {});
  std::fprintf(stderr, "[synth] loaded on cpu in %.2f s (%.2f GB/s)\n", w.stats().total_seconds,
               w.stats().gb_per_s());
  EXPECT_EQ(w.stats().bytes, 2'471'628'800u);
  EXPECT_EQ(w.bytes(), 2'471'628'800u);  // every 1B tensor is a multiple of 256 bytes
  // Spot-check the ends of every tensor against the generator.
  for (const auto& spec : expected_tensors(cfg)) {
    const auto* p = static_cast<const bf16_bits*>(w.find(spec.name));
    const uint64_t key = synth_tensor_key(opts.seed, spec.name);
    const TensorInit init = synth_tensor_init(spec, cfg, opts.init);
    const size_t n = spec.bytes() / 2;
    for (size_t i : {size_t{0}, size_t{1}, n / 2, n - 2, n - 1})
      ASSERT_EQ(p[i], synth_element(key, i, init)) << spec.name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace lantern
