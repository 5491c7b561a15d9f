// `lantern synth`: write a complete HF model directory with seeded random
// bf16 weights of a preset's exact shapes and the real Llama 3 tokenizer.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "kernels/base/errors.h"
#include "engine/synth.h"
#include "harness/cli/command.h"

namespace lantern::cli {
namespace {

int cmd_synth(const std::vector<std::string>& argv) {
  Args args(argv, {"--preset", "--out", "--seed", "--tokenizer-dir", "--threads"}, {"--help"});
  if (args.flag("--help")) {
    std::string presets;
    for (const auto& n : synth_preset_names()) presets += " " + n;
    std::fprintf(
        stderr,
        "usage: lantern synth --preset NAME --out DIR [--seed N] [--tokenizer-dir DIR] "
        "[--threads N]\n  presets:%s\n  same seed -> byte-identical files (default seed 0)\n",
        presets.c_str());
    return 0;
  }
  const std::string preset = args.require("--preset");
  const std::string out = args.require("--out");
  SynthOptions opts;
  if (auto s = args.get("--seed")) {
    char* end = nullptr;
    errno = 0;
    unsigned long long seed = std::strtoull(s->c_str(), &end, 10);
    LANTERN_CHECK(!s->empty() && (*s)[0] != '-' && end && *end == '\0' && errno == 0,
                  "option --seed expects a non-negative integer, got '%s'", s->c_str());
    opts.seed = seed;
  }
  opts.tokenizer_dir = args.get_or("--tokenizer-dir", "");
  opts.threads = static_cast<int>(args.get_int("--threads", 0));
  LANTERN_CHECK(opts.threads >= 0, "option --threads must be >= 0, got %d", opts.threads);

  const ModelConfig cfg = synth_preset(preset);
  std::fprintf(stderr, "synth: writing %s (seed %llu) to %s\n", preset.c_str(),
               static_cast<unsigned long long>(opts.seed), out.c_str());
  const SynthResult r = write_synthetic_model(cfg, out, opts);
  std::printf(
      "synth: wrote %s to %s: %llu weight bytes (model.safetensors %llu bytes) in %.2f s "
      "(%.2f GB/s)\n",
      preset.c_str(), out.c_str(), static_cast<unsigned long long>(r.payload_bytes),
      static_cast<unsigned long long>(r.file_bytes), r.seconds,
      r.seconds > 0 ? r.file_bytes / r.seconds / 1e9 : 0.0);
  return 0;
}

}  // namespace

LANTERN_COMMAND("synth", "write a synthetic HF model directory (seeded random bf16 weights)",
                cmd_synth);

}  // namespace lantern::cli
