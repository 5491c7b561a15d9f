#include "engine/weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/safetensors.h"
#include "engine/synth.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

ModelConfig micro_config(bool tied = true, int vocab = 64, int hidden = 16) {
  return test::micro_config({.hidden = hidden, .intermediate = 2 * hidden, .q_heads = 2,
                             .kv_heads = 1, .head_dim = hidden / 2, .vocab = vocab, .tied = tied});
}

std::string file_bytes(const fs::path& p, uint64_t begin, uint64_t n) {
  std::ifstream in(p, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(begin));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(static_cast<uint64_t>(in.gcount()), n);
  return s;
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

// Every view: table order, 256-byte aligned, the spec's shape and size, and
// the same bytes as the file region its header names.
void expect_block_matches_files(const Weights& w, const ModelConfig& cfg, const fs::path& dir) {
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  const SafetensorsModel m = open_safetensors_model(dir);
  ASSERT_EQ(w.views().size(), specs.size());
  size_t end = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightView& v = w.views()[i];
    EXPECT_EQ(v.name, specs[i].name);
    EXPECT_EQ(v.shape, specs[i].shape) << v.name;
    EXPECT_EQ(v.bytes, specs[i].bytes()) << v.name;
    EXPECT_EQ(v.offset % kWeightAlign, 0u) << v.name;
    EXPECT_GE(v.offset, end) << v.name;
    end = v.offset + v.bytes;
    const SafetensorsEntry* e = m.find(v.name);
    ASSERT_NE(e, nullptr) << v.name;
    const char* p = static_cast<const char*>(w.block()) + v.offset;
    ASSERT_EQ(e->bytes(), v.bytes);
    EXPECT_EQ(std::memcmp(p, file_bytes(e->file, e->begin, e->bytes()).data(), v.bytes), 0)
        << v.name;
    EXPECT_EQ(w.find(v.name), p);
  }
  EXPECT_LE(end, w.bytes());
  EXPECT_EQ(w.bytes() % kWeightAlign, 0u);
}

TEST(Weights, TensorTableFollowsConfig) {
  const ModelConfig cfg = micro_config();
  const std::vector<TensorSpec> t = expected_tensors(cfg);
  ASSERT_EQ(t.size(), 1u + 2 * 9 + 1);  // tied: no lm_head
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(t[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(t[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{8, 16}));  // k_proj [kv_dim, hidden]
  EXPECT_EQ(t[5].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(t[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(t[9].shape, (std::vector<int64_t>{16, 32}));  // [hidden, inter]
  EXPECT_EQ(t[9].role, TensorRole::w_down);
  EXPECT_EQ(t[18].layer, 1);
  EXPECT_EQ(t.back().name, "model.norm.weight");
  const std::vector<TensorSpec> untied = expected_tensors(micro_config(false));
  EXPECT_EQ(untied.back().name, "lm_head.weight");
  EXPECT_EQ(untied.back().shape, (std::vector<int64_t>{64, 16}));
}

TEST(Weights, LoadsIntoOneHostBlock) {
  auto dir = test::scratch_dir("weights_cpu");
  const ModelConfig cfg = micro_config();
  SynthOptions opts;
  opts.seed = 7;
  write_synthetic_weights(cfg, dir / "model.safetensors", opts);
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu);
  EXPECT_EQ(w.backend(), kernels::Backend::cpu);
  expect_block_matches_files(w, cfg, dir);

  // Values are the generator's, element by element.
  for (const auto& spec : expected_tensors(cfg)) {
    const auto* p = static_cast<const bf16_bits*>(w.find(spec.name));
    const uint64_t key = synth_tensor_key(opts.seed, spec.name);
    const TensorInit init = synth_tensor_init(spec, cfg, opts.init);
    for (size_t i = 0; i < spec.bytes() / 2; ++i)
      ASSERT_EQ(p[i], synth_element(key, i, init)) << spec.name << "[" << i << "]";
  }
  // Named pointers come from the table.
  EXPECT_EQ(w.embed, w.find("model.embed_tokens.weight"));
  EXPECT_EQ(w.lm_head, w.embed);  // tied
  EXPECT_EQ(w.final_norm, w.find("model.norm.weight"));
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.layers[1].attn_norm, w.find("model.layers.1.input_layernorm.weight"));
  EXPECT_EQ(w.layers[1].wq, w.find("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(w.layers[1].wk, w.find("model.layers.1.self_attn.k_proj.weight"));
  // Fused views: no copy, [wq; wk; wv] and [w_gate; w_up] over the same bytes.
  EXPECT_TRUE(w.fusable());
  EXPECT_EQ(w.layers[1].wqkv, w.layers[1].wq);
  EXPECT_EQ(w.layers[1].w_gate_up, w.layers[1].w_gate);
  ASSERT_EQ(w.fused_views().size(), 4u);
  EXPECT_EQ(w.fused_views()[2].name, "model.layers.1.self_attn.qkv_proj.weight (fused view)");
  EXPECT_EQ(w.fused_views()[2].shape, (std::vector<int64_t>{16 + 2 * 8, 16}));
  EXPECT_EQ(w.fused_views()[2].bytes, (16u + 2 * 8) * 16 * 2);
  EXPECT_EQ(w.fused_views()[3].shape, (std::vector<int64_t>{2 * 32, 16}));
  EXPECT_EQ(static_cast<const char*>(w.block()) + w.fused_views()[3].offset, w.layers[1].w_gate);
  EXPECT_EQ(w.layers[1].wv, w.find("model.layers.1.self_attn.v_proj.weight"));
  EXPECT_EQ(w.layers[1].wo, w.find("model.layers.1.self_attn.o_proj.weight"));
  EXPECT_EQ(w.layers[0].mlp_norm, w.find("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_EQ(w.layers[0].w_gate, w.find("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(w.layers[0].w_up, w.find("model.layers.0.mlp.up_proj.weight"));
  EXPECT_EQ(w.layers[0].w_down, w.find("model.layers.0.mlp.down_proj.weight"));
  // Alignment gaps read as zeros (norm weights are 32 bytes here).
  const WeightView& norm = w.views()[1];
  const char* gap = static_cast<const char*>(w.block()) + norm.offset + norm.bytes;
  EXPECT_EQ(std::string(gap, kWeightAlign - norm.bytes),
            std::string(kWeightAlign - norm.bytes, '\0'));

  size_t payload = 0;
  for (const auto& s : expected_tensors(cfg)) payload += s.bytes();
  EXPECT_EQ(w.stats().bytes, payload);
  EXPECT_GT(w.stats().total_seconds, 0);
  EXPECT_GE(w.stats().total_seconds, w.stats().read_seconds);
  EXPECT_THAT(error_of([&] { w.find("nope"); }), HasSubstr("no weight tensor named nope"));
}

// hidden 12: wq is 288 bytes and wk 144, so alignment gaps separate them and
// there is no fused view (the engine then runs the unfused table).
TEST(Weights, FusedViewsNeedAdjacentTensors) {
  auto dir = test::scratch_dir("weights_gaps");
  const ModelConfig cfg = micro_config(true, 64, 12);
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu);
  EXPECT_FALSE(w.fusable());
  EXPECT_EQ(w.layers[0].wqkv, nullptr);
  EXPECT_EQ(w.layers[0].w_gate_up, nullptr);
  EXPECT_TRUE(w.fused_views().empty());
}

TEST(Weights, UntiedLmHeadAndMove) {
  auto dir = test::scratch_dir("weights_untied");
  const ModelConfig cfg = micro_config(/*tied=*/false);
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu);
  EXPECT_EQ(w.lm_head, w.find("lm_head.weight"));
  EXPECT_NE(w.lm_head, w.embed);
  expect_block_matches_files(w, cfg, dir);

  const void* embed = w.embed;
  const void* block = w.block();
  Weights moved = std::move(w);
  EXPECT_EQ(moved.embed, embed);
  EXPECT_EQ(moved.block(), block);
  EXPECT_EQ(moved.layers.size(), 2u);
  EXPECT_EQ(w.block(),
            nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  EXPECT_TRUE(w.views().empty());
  moved = Weights{};
  EXPECT_EQ(moved.block(), nullptr);
}

TEST(Weights, TensorsSpanningStagingChunks) {
  // 28000 x 1280 bf16 = 68.4 MiB: the embedding crosses a 64 MiB chunk boundary.
  auto dir = test::scratch_dir("weights_chunks");
  const ModelConfig cfg = micro_config(/*tied=*/true, /*vocab=*/28000, /*hidden=*/1280);
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  std::vector<std::pair<size_t, size_t>> calls;
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu,
                            [&](size_t done, size_t total) { calls.emplace_back(done, total); });
  expect_block_matches_files(w, cfg, dir);
  ASSERT_GE(calls.size(), 2u);  // 70 MB in 64 MiB chunks
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.back().second, w.stats().bytes);
  fs::remove_all(dir);
}

TEST(Weights, LoadsShardedModel) {
  auto single = test::scratch_dir("weights_single");
  auto sharded = test::scratch_dir("weights_sharded");
  const ModelConfig cfg = micro_config();
  write_synthetic_weights(cfg, single / "model.safetensors", SynthOptions{});
  // Split the single file into two shards by layer, copying the bytes.
  const SafetensorsModel m = open_safetensors_model(single);
  nlohmann::json index;
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<TensorSpec> specs;
    for (const auto& s : expected_tensors(cfg))
      if ((s.layer == 1) == (shard == 1)) specs.push_back(s);
    const std::string name =
        shard == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    SafetensorsLayout l = safetensors_layout(specs);
    std::ofstream out(sharded / name, std::ios::binary);
    out << l.prefix;
    for (const auto& s : specs) {
      const SafetensorsEntry* e = m.find(s.name);
      out << file_bytes(e->file, e->begin, e->bytes());
      index["weight_map"][s.name] = name;
    }
  }
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
  Weights a = Weights::load(cfg, single, kernels::Backend::cpu);
  Weights b = Weights::load(cfg, sharded, kernels::Backend::cpu);
  expect_block_matches_files(b, cfg, sharded);
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(std::memcmp(a.block(), b.block(), a.bytes()), 0);
}

TEST(Weights, WarnsAboutExtraTensors) {
  auto dir = test::scratch_dir("weights_extra");
  const ModelConfig cfg = micro_config();
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {4}, "F32"});
  SafetensorsLayout l = safetensors_layout(specs);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      << l.prefix << std::string(l.data_bytes, '\0');
  ::testing::internal::CaptureStderr();
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("warning: "));
  EXPECT_THAT(err, HasSubstr("1 tensor not used by the model: "
                             "model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_EQ(w.views().size(), expected_tensors(cfg).size());
}

// Hostile-input probe (issue 15): a layer the config does not have means the
// config and checkpoint disagree; that is an error, not a warning.
TEST(Weights, RejectsLayersBeyondNumHiddenLayers) {
  auto dir = test::scratch_dir("weights_extra_layer");
  const ModelConfig cfg = micro_config();
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  const std::string name = "model.layers." + std::to_string(cfg.num_layers) + ".mlp.up_proj.weight";
  specs.push_back({name, {2 * 16, 16}, "BF16"});
  SafetensorsLayout l = safetensors_layout(specs);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      << l.prefix << std::string(l.data_bytes, '\0');
  EXPECT_THAT(error_of([&] { Weights::load(cfg, dir, kernels::Backend::cpu); }),
              HasSubstr("tensor " + name + " belongs to layer " + std::to_string(cfg.num_layers) +
                        " but config.json has num_hidden_layers=" + std::to_string(cfg.num_layers)));
}

// NaN/Inf weights load (the file is well-formed) but are reported at load,
// naming the tensors and counts, on both the in-place and staged paths.
TEST(Weights, WarnsAboutNonFiniteValues) {
  auto dir = test::scratch_dir("weights_nan");
  const ModelConfig cfg = micro_config();
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  const SafetensorsModel m = open_safetensors_model(dir);
  const SafetensorsEntry* e = m.find("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(e, nullptr);
  {
    std::fstream f(dir / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
    const unsigned char nan_bf16[2] = {0xC0, 0x7F}, inf_bf16[2] = {0x80, 0xFF};  // little-endian
    f.seekp(static_cast<std::streamoff>(e->begin + 6));
    f.write(reinterpret_cast<const char*>(nan_bf16), 2);
    f.seekp(static_cast<std::streamoff>(e->begin + 10));
    f.write(reinterpret_cast<const char*>(inf_bf16), 2);
  }
  ::testing::internal::CaptureStderr();
  Weights w = Weights::load(cfg, dir, kernels::Backend::cpu);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("2 NaN/Inf values in the weights: model.layers.1.mlp.down_proj.weight (2)"));
  // A clean model prints nothing of the kind.
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  ::testing::internal::CaptureStderr();
  Weights clean = Weights::load(cfg, dir, kernels::Backend::cpu);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::Not(HasSubstr("NaN/Inf")));
}

TEST(Weights, ErrorsNameThePathAndTensor) {
  auto dir = test::scratch_dir("weights_errors");
  const ModelConfig cfg = micro_config();
  auto load_error = [&](const fs::path& p) {
    return error_of([&] { Weights::load(cfg, p, kernels::Backend::cpu); });
  };
  EXPECT_THAT(load_error(dir / "absent"),
              HasSubstr("model directory " + (dir / "absent").string() + " does not exist"));
  std::ofstream(dir / "a-file") << "x";
  EXPECT_THAT(load_error(dir / "a-file"), HasSubstr("is a file, expected a directory"));
  // The file was written for a different config: hidden 32 instead of 16.
  write_synthetic_weights(micro_config(true, 64, 32), dir / "model.safetensors", SynthOptions{});
  EXPECT_THAT(load_error(dir), HasSubstr("model.safetensors: model.embed_tokens.weight: expected "
                                         "[64, 16] BF16, found [64, 32] BF16"));
}

TEST(Weights, CudaWithoutGpuFailsClearly) {
  if (test::gpu_available()) GTEST_SKIP() << "a GPU is present; weights_gpu_test covers CUDA loads";
  auto dir = test::scratch_dir("weights_nogpu");
  const ModelConfig cfg = micro_config();
  write_synthetic_weights(cfg, dir / "model.safetensors", SynthOptions{});
  const std::string err = error_of([&] { Weights::load(cfg, dir, kernels::Backend::cuda); });
  EXPECT_THAT(err, HasSubstr("--device cuda requested but no usable CUDA GPU ("));
  EXPECT_THAT(err, HasSubstr("): use --device cpu"));
}

}  // namespace
}  // namespace lantern
