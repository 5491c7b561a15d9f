// `lantern bench`: decode/prefill throughput of the engine against the
// roofline measured in the same run. Batch B requests of P random prompt
// tokens each generate N tokens (EOS ignored); every engine step is timed on
// the host (a step ends with a device sync, so host time is GPU time plus
// launch gaps). Prints a table and, with --json FILE, writes the numbers.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"
#include "harness/roofline.h"

namespace lantern::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int cmd_bench(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--batch", "--prompt-len", "--decode-steps", "--json", "--seed", "--bandwidth-gbs"})
    values.push_back(o);
  Args args(argv, values, engine_flag_options());
  int batch = static_cast<int>(args.get_int("--batch", 1));
  int prompt_len = static_cast<int>(args.get_int("--prompt-len", 128));
  int steps = static_cast<int>(args.get_int("--decode-steps", 128));
  LANTERN_CHECK(batch >= 1 && prompt_len >= 1 && steps >= 2, "--batch, --prompt-len >= 1 and --decode-steps >= 2");
  EngineLimits lim = limits_from_args(args);
  lim.max_seqs = std::max(lim.max_seqs, batch);
  lim.max_batch_tokens = std::max(lim.max_batch_tokens, std::max(batch, prompt_len));
  lim.max_context = std::max(lim.max_context, prompt_len + steps + 1);
  LoadedEngine le = build_engine(args, nullptr, &lim);
  Engine& engine = *le.engine;
  const ModelConfig& cfg = le.config;
  bool cuda = backend_from_args(args) == kernels::Backend::cuda;

  double bw_gbs = args.get_double("--bandwidth-gbs", 0);
  harness::RooflineResult roof;
  if (cuda && bw_gbs <= 0) {
    roof = harness::measure_roofline();
    bw_gbs = roof.copy_gb_per_s;
  }

  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int("--seed", 1, 0, LONG_MAX)));
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 300);
  auto submit_all = [&](int new_tokens) {
    for (int b = 0; b < batch; ++b) {
      Request r;
      r.prompt.resize(prompt_len);
      for (auto& t : r.prompt) t = tok(rng);
      r.max_new_tokens = new_tokens;
      r.stop_at_eos = false;
      engine.submit(std::move(r));
    }
  };
  // Warm-up: one short round (graph capture, cuBLAS heuristics, page-in).
  submit_all(4);
  engine.run_until_idle();
  engine.take_finished();

  submit_all(steps);
  std::vector<double> prefill_s, decode_s, decode_host_s, decode_model_s;
  while (true) {
    double t0 = engine.now_s();
    if (!engine.step()) break;
    double dt = engine.now_s() - t0;
    // The first steps prefill (the whole batch fits when batch * prompt_len
    // <= max_batch_tokens); every later step decodes all running sequences.
    if (prefill_s.size() < static_cast<size_t>((batch * prompt_len + lim.max_batch_tokens - 1) / lim.max_batch_tokens))
      prefill_s.push_back(dt);
    else {
      decode_s.push_back(dt);
      decode_host_s.push_back(engine.last_step_timing().host_s);
      decode_model_s.push_back(engine.last_step_timing().model_s);
    }
  }
  engine.take_finished();
  // Steady state: drop the tail where sequences finish at different steps.
  double step_ms = median(decode_s) * 1e3;
  double tok_s = batch / (step_ms / 1e3);
  double weight_bytes = static_cast<double>(le.load_stats.bytes);
  double kv_bytes_per_step = 2.0 * cfg.num_layers * cfg.kv_dim() * (cuda ? 2 : 4) * batch * (prompt_len + steps / 2.0);
  double floor_ms = bw_gbs > 0 ? (weight_bytes + kv_bytes_per_step) / (bw_gbs * 1e9) * 1e3 : 0;
  double prefill_ms = 0;
  for (double s : prefill_s) prefill_ms += s * 1e3;

  std::printf("lantern bench: %s, batch %d, prompt %d, %d decode steps (%s)\n", le.model_dir.c_str(), batch,
              prompt_len, steps, cuda ? "cuda" : "cpu");
  std::printf("  prefill          %10.3f ms  (%.0f tokens/s)\n", prefill_ms, batch * prompt_len / (prefill_ms / 1e3));
  std::printf("  decode step      %10.3f ms  (median of %zu)\n", step_ms, decode_s.size());
  std::printf("  decode tokens/s  %10.1f\n", tok_s);
  const double host_ms = median(decode_host_s) * 1e3, model_ms = median(decode_model_s) * 1e3;
  std::printf("  host per step    %10.3f ms  (scheduling, inputs, postprocess; Model::run: %.3f ms, "
              "medians; steps are synchronous, so the host time adds to each)\n",
              host_ms, model_ms);
  if (floor_ms > 0) {
    std::printf("  roofline floor   %10.3f ms  (%.2f GB weights + %.3f GB KV at %.0f GB/s measured copy bw)\n",
                floor_ms, weight_bytes / 1e9, kv_bytes_per_step / 1e9, bw_gbs);
    std::printf("  of roofline      %10.1f %%\n", 100.0 * floor_ms / step_ms);
  }
  if (auto path = args.get("--json")) {
    nlohmann::json j = {{"model", le.model_dir.string()}, {"backend", cuda ? "cuda" : "cpu"},
                        {"batch", batch}, {"prompt_len", prompt_len}, {"decode_steps", steps},
                        {"prefill_ms", prefill_ms}, {"decode_step_ms", step_ms}, {"decode_tokens_per_s", tok_s},
                        {"roofline_floor_ms", floor_ms}, {"copy_bandwidth_gbs", bw_gbs},
                        {"fraction_of_roofline", floor_ms > 0 ? floor_ms / step_ms : 0},
                        {"decode_host_ms", host_ms}, {"decode_model_run_ms", model_ms},
                        {"fusion", engine.describe()["fusion"]},
                        {"kernels", engine.describe()["kernels"]}, {"roofline", roof.to_json()}};
    std::ofstream(*path) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
LANTERN_COMMAND("bench", "decode/prefill throughput against the measured roofline", cmd_bench);
}  // namespace lantern::cli
