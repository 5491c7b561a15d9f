// `lantern bench`: decode/prefill throughput of the engine against the
// roofline measured in the same run. Batch B requests of P random prompt
// tokens each generate N tokens (EOS ignored); every engine step is timed on
// the host (a step ends with a device sync, so host time is GPU time plus
// launch gaps). Prints a table and, with --json FILE, writes the numbers.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"
#include "harness/experiment/experiment.h"
#include "kernels/gemm_plan.h"
#include "harness/gpu_clocks.h"
#include "harness/roofline.h"

namespace lantern::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Decode steps of one kind: wall time, and StepTiming's host / Model::run split.
struct StepSamples {
  std::vector<double> wall_s, host_s, model_s;
  void add(double wall, const StepTiming& t) {
    wall_s.push_back(wall);
    host_s.push_back(t.host_s);
    model_s.push_back(t.model_s);
  }
};

// "1,2,4" -> {1, 2, 4}; each value >= lo.
std::vector<int> int_list(const std::string& text, const char* option, int lo) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    LANTERN_CHECK(!item.empty() && end && *end == '\0' && v >= lo && v <= (1 << 24),
                  "%s: '%s' is not an integer >= %d (a value or a comma-separated list, e.g. 1,8,64)",
                  option, item.c_str(), lo);
    out.push_back(int(v));
    at = comma + 1;
  }
  return out;
}

// One (batch, prompt) point: host-timed prefill and median decode step.
struct Point {
  int batch = 0, prompt_len = 0;
  double prefill_ms = 0, step_ms = 0;
  double decode_floor_ms = 0, prefill_floor_ms = 0;
  double host_ms = 0, model_ms = 0;  // decode medians: host work per step, time inside Model::run
  std::vector<double> decode_each_ms;  // every decode step in order (JSON: decode_steps_ms)
  size_t decode_steps = 0;   // steps the median is taken over (decode_each_ms)
  size_t prefill_steps = 0;  // steps that carried prompt rows (their times sum to prefill_ms)
  size_t partial_steps = 0;  // decode steps with part of the batch (ramp-down)
  bool whole_batch = true;   // false: no step decoded the whole batch; step_ms is over partial steps
  std::optional<harness::GpuClockDelta> clocks;  // NVML over the point (CUDA, when NVML opens)
};

// The prefill floor: the larger of the FLOPs at the measured GEMM peak (every
// layer's matrices on every prompt token, causal attention, the LM head on the
// last token) and the weights read once at the copy bandwidth.
double prefill_floor_ms(const ModelConfig& c, double weight_bytes, int batch, int prompt_len,
                        double bw_gbs, double tflops) {
  const double tokens = double(batch) * prompt_len;
  const double h = c.hidden_size, per_layer = h * (c.q_dim() + 2.0 * c.kv_dim()) + c.q_dim() * h +
                                                 3.0 * h * c.intermediate_size;
  const double pairs = double(batch) * prompt_len * (prompt_len + 1.0) / 2;
  const double flops = c.num_layers * (2 * per_layer * tokens + 4.0 * c.num_q_heads * c.head_dim * pairs) +
                       2.0 * batch * h * c.vocab_size;
  const double compute_ms = tflops > 0 ? flops / (tflops * 1e12) * 1e3 : 0;
  const double memory_ms = bw_gbs > 0 ? weight_bytes / (bw_gbs * 1e9) * 1e3 : 0;
  return std::max(compute_ms, memory_ms);
}

// gemm.6's start-up plans (kernels/gemm_plan.h): a count, or with --verbose
// one line per (m bucket, n, k, out type).
void print_gemm_plans(const Engine& engine, bool verbose) {
  const std::vector<kernels::GemmPlan> plans = engine.gemm_plans();
  if (plans.empty()) return;
  double chosen = 0, heuristic = 0;
  for (const kernels::GemmPlan& p : plans) chosen += p.us, heuristic += p.heuristic_us;
  std::printf("gemm plans: %zu shapes measured (sum of medians %.1f us vs %.1f us for the heuristic's "
              "picks)%s\n",
              plans.size(), chosen, heuristic, verbose ? ":" : "; --verbose lists them");
  if (verbose)
    for (const kernels::GemmPlan& p : plans) std::printf("  %s\n", p.describe().c_str());
}

std::string sampling_label(const SamplingParams& s) {
  if (!(s.temperature > 0.0f)) return "greedy";
  char buf[96];
  std::snprintf(buf, sizeof buf, "sampled: T %g, top_k %d, top_p %g", s.temperature, s.top_k, s.top_p);
  return buf;
}

SamplingParams sampling_from_args(const Args& args) {
  // Sampled decode (the sampler runs every step) when --temperature > 0; greedy (argmax) by default.
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(args.get_double("--temperature", 0.0, 0.0, 1e6));
  sampling.top_k = static_cast<int>(args.get_int("--top-k", 0, 0));
  sampling.top_p = static_cast<float>(args.get_double("--top-p", 1.0, 1e-9, 1.0));
  return sampling;
}

// Everything a bench run holds while it measures its points.
struct BenchRun {
  LoadedEngine le;
  bool cuda = false, sweep = false;
  int steps = 0;
  SamplingParams sampling;
  std::mt19937_64 rng;
  std::uniform_int_distribution<int32_t> tok;  // random prompt ids
  double bw_gbs = 0, weight_bytes = 0;
  harness::RooflineResult roof;
  std::unique_ptr<harness::GpuClocks> clocks;
  std::unique_ptr<harness::GpuClockSampler> sampler;

  void submit_all(int batch, int prompt_len, int new_tokens);
  Point measure(int batch, int prompt_len);
};

void BenchRun::submit_all(int batch, int prompt_len, int new_tokens) {
  for (int b = 0; b < batch; ++b) {
    Request r;
    r.prompt.resize(prompt_len);
    for (auto& t : r.prompt) t = tok(rng);
    r.max_new_tokens = new_tokens;
    r.stop_at_eos = false;
    r.sampling = sampling;
    r.sampling.seed = rng();
    le.engine->submit(std::move(r));
  }
}

Point BenchRun::measure(int batch, int prompt_len) {
  Engine& engine = *le.engine;
  const std::optional<harness::GpuClockReading> before = clocks ? std::optional(clocks->read()) : std::nullopt;
  if (sampler) sampler->start();
  submit_all(batch, prompt_len, steps);
  // The scheduler puts the running sequences' decode rows first and fills
  // the rest of a step with prompt chunks, so with batch * prompt_len >
  // max_batch_tokens the early sequences decode while later ones prefill
  // (mixed steps), and the first finish before the last: the batch is whole
  // only between the last prefill and the first finish. The decode step is
  // the median over the steps that decode the WHOLE batch (no prompt rows,
  // `batch` rows); when there are none (too few --decode-steps for the
  // prefill's length) over every step without prompt rows, with a warning.
  // Prefill: the sum over the steps that carry prompt rows.
  std::vector<double> prefill_s;
  StepSamples whole, partial;
  while (true) {
    double t0 = engine.now_s();
    if (!engine.step()) break;
    const double dt = engine.now_s() - t0;
    const StepTiming& t = engine.last_step_timing();
    if (t.decode_rows < t.rows)
      prefill_s.push_back(dt);
    else
      (t.rows == batch ? whole : partial).add(dt, t);
  }
  engine.take_finished();
  Point pt;
  if (before) {
    harness::GpuClockDelta sampled;
    if (sampler) sampler->stop(sampled);  // first: its thread's NVML reads end before the closing one
    pt.clocks = harness::clock_delta(*before, clocks->read());
    pt.clocks->sm_samples = sampled.sm_samples;
    pt.clocks->sm_mean_mhz = sampled.sm_mean_mhz;
    pt.clocks->sm_min_mhz = sampled.sm_min_mhz;
  }
  pt.batch = batch;
  pt.prompt_len = prompt_len;
  pt.partial_steps = partial.wall_s.size();
  pt.whole_batch = !whole.wall_s.empty();
  if (!pt.whole_batch)
    std::fprintf(stderr,
                 "bench: batch %d, prompt %d: no step decoded all %d sequences at once (the first finished "
                 "before the last prefilled); the decode step is the median of %zu partial-batch steps -- "
                 "raise --decode-steps\n",
                 batch, prompt_len, batch, partial.wall_s.size());
  const StepSamples& counted = pt.whole_batch ? whole : partial;
  pt.step_ms = median(counted.wall_s) * 1e3;
  for (double s : counted.wall_s) pt.decode_each_ms.push_back(std::round(s * 1e6) / 1e3);
  pt.decode_steps = counted.wall_s.size();
  pt.host_ms = median(counted.host_s) * 1e3;
  pt.model_ms = median(counted.model_s) * 1e3;
  for (double s : prefill_s) pt.prefill_ms += s * 1e3;
  pt.prefill_steps = prefill_s.size();
  const ModelConfig& cfg = le.config;
  const double kv_bytes = 2.0 * cfg.num_layers * cfg.kv_dim() * (cuda ? 2 : 4) * batch * (prompt_len + steps / 2.0);
  pt.decode_floor_ms = bw_gbs > 0 ? (weight_bytes + kv_bytes) / (bw_gbs * 1e9) * 1e3 : 0;
  pt.prefill_floor_ms = prefill_floor_ms(cfg, weight_bytes, batch, prompt_len, bw_gbs, roof.gemm_tflop_per_s);
  return pt;
}

// --gpu-clocks sample|read|off: the GPU's clocks and throttled time over each point
// (harness/gpu_clocks.h): the same build runs 6 % slower while the power policy holds the SM
// clock down.
void open_clocks(BenchRun& run, const Args& args) {
  const std::string mode = args.get("--gpu-clocks").value_or("sample");
  LANTERN_CHECK(mode == "sample" || mode == "read" || mode == "off", "--gpu-clocks %s: expected sample, read or off",
                mode.c_str());
  if (!run.cuda || mode == "off") return;
  std::string why;
  run.clocks = harness::GpuClocks::open(gpu_from_args(args), &why);
  if (!run.clocks) std::fprintf(stderr, "bench: no GPU clock readings (%s)\n", why.c_str());
  // The SM clock every millisecond while a point runs (a spare core's NVML reads).
  if (run.clocks && mode == "sample") run.sampler = std::make_unique<harness::GpuClockSampler>(*run.clocks, 1.0);
}

void print_sweep_header(const BenchRun& run) {
  std::printf("lantern bench: %s, %d decode steps (%s, %s); copy %.0f GB/s, GEMM %.0f TFLOP/s measured\n",
              run.le.model_dir.c_str(), run.steps, run.cuda ? "cuda" : "cpu", sampling_label(run.sampling).c_str(),
              run.bw_gbs, run.roof.gemm_tflop_per_s);
  std::printf("%6s %7s | %11s %11s %6s | %10s %10s %6s %11s | %8s %8s\n", "batch", "prompt", "prefill ms",
              "floor ms", "roof%", "step ms", "floor ms", "roof%", "tokens/s", "host ms", "run ms");
}

void print_sweep_row(const Point& pt) {
  std::printf("%6d %7d | %11.3f %11.3f %5.1f%% | %10.3f %10.3f %5.1f%% %11.1f | %8.3f %8.3f\n", pt.batch, pt.prompt_len,
              pt.prefill_ms, pt.prefill_floor_ms, pt.prefill_ms > 0 ? 100 * pt.prefill_floor_ms / pt.prefill_ms : 0,
              pt.step_ms, pt.decode_floor_ms, pt.step_ms > 0 ? 100 * pt.decode_floor_ms / pt.step_ms : 0,
              pt.batch / (pt.step_ms / 1e3), pt.host_ms, pt.model_ms);
  if (!pt.whole_batch) std::printf("%6s %7s   (decode step of a partial batch: raise --decode-steps)\n", "", "");
  if (pt.clocks && pt.clocks->throttled())
    std::printf("%6s %7s   (GPU throttled: %s)\n", "", "", pt.clocks->summary().c_str());
}

void print_single(const BenchRun& run, const Point& pt) {
  const bool overlap = run.le.engine->describe()["overlap"] == "on";
  std::printf("lantern bench: %s, batch %d, prompt %d, %d decode steps (%s, %s)\n", run.le.model_dir.c_str(),
              pt.batch, pt.prompt_len, run.steps, run.cuda ? "cuda" : "cpu", sampling_label(run.sampling).c_str());
  std::printf("  prefill          %10.3f ms  (%.0f tokens/s)\n", pt.prefill_ms,
              pt.batch * pt.prompt_len / (pt.prefill_ms / 1e3));
  std::printf("  decode step      %10.3f ms  (median of %zu steps %s; %zu prefill steps, %zu ramp-down steps)\n",
              pt.step_ms, pt.decode_steps, pt.whole_batch ? "decoding the whole batch" : "of a PARTIAL batch",
              pt.prefill_steps, pt.whole_batch ? pt.partial_steps : 0);
  std::printf("  decode tokens/s  %10.1f\n", pt.batch / (pt.step_ms / 1e3));
  if (pt.clocks)
    std::printf("  GPU clocks       %s%s\n", pt.clocks->summary().c_str(),
                pt.clocks->throttled() ? "  -- THROTTLED: compare with runs at the same clock" : "");
  std::printf("  host per step    %10.3f ms  (scheduling, inputs, postprocess; Model launch + wait: %.3f ms, "
              "medians; %s)\n",
              pt.host_ms, pt.model_ms,
              overlap ? "decode steps overlap: the host works while the device runs the next step"
                      : "steps are synchronous, so the host time adds to each");
  if (pt.decode_floor_ms > 0) {
    const double kv_bytes_per_step = pt.decode_floor_ms * (run.bw_gbs * 1e6) - run.weight_bytes;
    std::printf("  roofline floor   %10.3f ms  (%.2f GB weights + %.3f GB KV at %.0f GB/s measured copy bw)\n",
                pt.decode_floor_ms, run.weight_bytes / 1e9, kv_bytes_per_step / 1e9, run.bw_gbs);
    std::printf("  of roofline      %10.1f %%\n", 100.0 * pt.decode_floor_ms / pt.step_ms);
  }
}

// --json: the first point at the top level (what single-point readers and scripts/gpu-ab.sh
// read), the engine's configuration, and with a sweep every point under "points".
nlohmann::json bench_json(const BenchRun& run, const std::vector<Point>& points) {
  const Point& pt = points.front();
  const nlohmann::json d = run.le.engine->describe();
  nlohmann::json j = {{"model", run.le.model_dir.string()}, {"backend", run.cuda ? "cuda" : "cpu"},
                      {"batch", pt.batch}, {"prompt_len", pt.prompt_len}, {"decode_steps", run.steps},
                      {"prefill_ms", pt.prefill_ms}, {"decode_step_ms", pt.step_ms},
                      {"decode_tokens_per_s", pt.batch / (pt.step_ms / 1e3)},
                      {"roofline_floor_ms", pt.decode_floor_ms}, {"copy_bandwidth_gbs", run.bw_gbs},
                      {"fraction_of_roofline", pt.decode_floor_ms > 0 ? pt.decode_floor_ms / pt.step_ms : 0},
                      {"decode_host_ms", pt.host_ms}, {"decode_model_run_ms", pt.model_ms},
                      {"decode_steps_ms", pt.decode_each_ms}, {"decode_whole_batch", pt.whole_batch},
                      {"decode_median_over_steps", pt.decode_steps}, {"prefill_steps", pt.prefill_steps},
                      {"sampling", {{"temperature", run.sampling.temperature}, {"top_k", run.sampling.top_k},
                                    {"top_p", run.sampling.top_p}}},
                      {"fusion", d["fusion"]}, {"prefill_graphs", d["prefill_graphs"]}, {"overlap", d["overlap"]},
                      {"prune_last", d["prune_last"]}, {"fold_attention", d["fold_attention"]},
                      {"final_fuse", d["final_fuse"]},
                      {"kernels", d["kernels"]}, {"roofline", run.roof.to_json()}};
  if (d.contains("gemm_plans")) j["gemm_plans"] = d["gemm_plans"];
  if (pt.clocks) j["gpu_clocks"] = pt.clocks->to_json();
  if (run.sweep) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Point& q : points) {
      rows.push_back({{"batch", q.batch}, {"prompt_len", q.prompt_len}, {"prefill_ms", q.prefill_ms},
                      {"prefill_floor_ms", q.prefill_floor_ms}, {"decode_step_ms", q.step_ms},
                      {"decode_floor_ms", q.decode_floor_ms}, {"decode_host_ms", q.host_ms},
                      {"decode_model_run_ms", q.model_ms}, {"decode_steps_ms", q.decode_each_ms},
                      {"decode_whole_batch", q.whole_batch}, {"decode_median_over_steps", q.decode_steps},
                      {"prefill_steps", q.prefill_steps}});
      if (q.clocks) rows.back()["gpu_clocks"] = q.clocks->to_json();
    }
    j["points"] = rows;
  }
  return j;
}

int cmd_bench(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--batch", "--prompt-len", "--decode-steps", "--json", "--seed", "--bandwidth-gbs",
                        "--temperature", "--top-k", "--top-p", "--gemm-plans", "--gpu-clocks"})
    values.push_back(o);
  auto flags = engine_flag_options();
  flags.push_back("--verbose");
  Args args(argv, values, flags);
  const std::vector<int> batches = int_list(args.get("--batch").value_or("1"), "--batch", 1);
  const std::vector<int> prompts = int_list(args.get("--prompt-len").value_or("128"), "--prompt-len", 1);
  BenchRun run;
  run.steps = static_cast<int>(args.get_int("--decode-steps", 128));
  LANTERN_CHECK(run.steps >= 2, "--decode-steps must be >= 2");
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int max_prompt = *std::max_element(prompts.begin(), prompts.end());
  EngineLimits lim = limits_from_args(args);
  lim.max_seqs = std::max(lim.max_seqs, max_batch);
  lim.max_batch_tokens = std::max(lim.max_batch_tokens, std::max(max_batch, max_prompt));
  lim.max_context = std::max(lim.max_context, max_prompt + run.steps + 1);
  if (auto plans = args.get("--gemm-plans")) pin_gemm_plans_from(*plans);
  run.le = build_engine(args, nullptr, &lim);
  run.cuda = backend_from_args(args) == kernels::Backend::cuda;
  run.sweep = batches.size() > 1 || prompts.size() > 1;
  open_clocks(run, args);
  run.bw_gbs = args.get_double("--bandwidth-gbs", 0);
  if (run.cuda && run.bw_gbs <= 0) {
    run.roof = harness::measure_roofline();
    run.bw_gbs = run.roof.copy_gb_per_s;
  }
  run.sampling = sampling_from_args(args);
  run.rng.seed(static_cast<uint64_t>(args.get_int("--seed", 1, 0, LONG_MAX)));
  // Random ids below Llama 3's special tokens (the top 256 of 128,256); all of a small test vocabulary.
  const int vocab = run.le.config.vocab_size;
  run.tok = std::uniform_int_distribution<int32_t>(0, vocab > 1000 ? vocab - 300 : vocab - 1);
  run.weight_bytes = static_cast<double>(run.le.load_stats.bytes);
  // Warm-up: one short round (graph capture, cuBLAS heuristics, page-in).
  run.submit_all(batches[0], prompts[0], 4);
  run.le.engine->run_until_idle();
  run.le.engine->take_finished();

  std::vector<Point> points;
  if (run.sweep) print_sweep_header(run);
  for (int batch : batches)
    for (int prompt_len : prompts) {
      if (run.sweep) std::fprintf(stderr, "bench: batch %d, prompt %d\n", batch, prompt_len);
      points.push_back(run.measure(batch, prompt_len));
      if (run.sweep) print_sweep_row(points.back());
    }
  if (!run.sweep) print_single(run, points.front());
  print_gemm_plans(*run.le.engine, args.flag("--verbose"));
  if (auto path = args.get("--json")) std::ofstream(*path) << bench_json(run, points).dump(2) << "\n";
  return 0;
}

}  // namespace
LANTERN_COMMAND("bench", "decode/prefill throughput against the measured roofline", cmd_bench);
}  // namespace lantern::cli
