// Harness overhead on decode: tokens/s of the same workload with the harness
//   none   no observer attached (EngineOptions::observer == nullptr)
//   off    a Session attached with every part switched off at run time
//   on     everything on: NVTX, timeline, CUPTI (cuda), alias tracker, KV
//          recorder, memory map, recording a run directory
// and "compiled out": the `none` number of a build configured with
// -DLANTERN_INSTRUMENTATION=OFF (preset no-instrumentation), which this
// program reports as such. Goals (docs/harness.md): on >= 97 %, off >= 99.5 %
// of none.
//
//   LANTERN_BENCH_MODEL=/path/to/model   model directory (required)
//   LANTERN_BENCH_BACKEND=cuda|cpu       default: cuda when a GPU is usable
//   LANTERN_BENCH_BATCH=1                concurrent sequences
//   LANTERN_BENCH_TOKENS=256             decode tokens per sequence
//   LANTERN_BENCH_REPEATS=5              timed runs per mode (median reported)
//   LANTERN_BENCH_RUN_DIR=...            where "on" records (default: build/bench-runs)
//
//   build/<preset>/bench/bench_harness_overhead
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "engine/common.h"
#include "engine/engine.h"
#include "harness/session.h"

namespace {

using namespace lantern;

long env_int(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  LANTERN_CHECK(end && *end == '\0' && x > 0, "%s must be a positive integer, got '%s'", name, v);
  return x;
}

bool gpu_usable() {
  int n = 0;
  bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

struct Workload {
  std::filesystem::path model;
  kernels::Backend backend;
  int batch, tokens, repeats;
  std::filesystem::path run_root;
};

enum class Mode { none, off, on };
const char* mode_name(Mode m) { return m == Mode::none ? "none" : m == Mode::off ? "off" : "on"; }

// Median decode tokens/s over the repeats of one mode.
double measure(const Workload& w, Mode mode) {
  harness::HarnessOptions ho;
  ho.print_summary = mode == Mode::on;
  ho.roofline = false;  // measured at finish, outside the timing; not needed here
  if (mode == Mode::off) {
    ho.nvtx = ho.cupti = ho.alias = ho.kv = ho.memory = ho.timeline = false;
  }
  if (mode == Mode::on) {
    ho.record_dir = w.run_root / strformat("overhead-on-%lld",
                                           static_cast<long long>(std::time(nullptr)));
    std::filesystem::remove_all(ho.record_dir);
  }
  std::unique_ptr<harness::Session> session;
  if (mode != Mode::none) session = std::make_unique<harness::Session>(ho);

  ModelConfig cfg = ModelConfig::load(w.model);
  EngineOptions eo;
  eo.backend = w.backend;
  eo.limits.max_seqs = std::max(w.batch, 1);
  eo.limits.max_context = std::min(cfg.max_position_embeddings, 64 + w.tokens + 16);
  eo.limits.max_batch_tokens = std::max(64 * w.batch, 64);
  eo.limits.kv_memory_fraction = 0.5;
  if (session) session->apply(eo);
  Engine engine(cfg, Weights::load(cfg, w.model, w.backend), eo);

  auto run_once = [&](int tokens) {
    for (int b = 0; b < w.batch; ++b) {
      Request r;
      for (int t = 0; t < 16; ++t) r.prompt.push_back((1000 + 37 * t + 11 * b) % cfg.vocab_size);
      r.max_new_tokens = tokens;
      r.stop_at_eos = false;
      engine.submit(std::move(r));
    }
    auto t0 = std::chrono::steady_clock::now();
    engine.run_until_idle();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const RequestResult& r : engine.take_finished())
      if (session) session->on_result(r, "");
    return static_cast<double>(w.batch) * tokens / s;
  };
  run_once(8);  // warm-up: first-touch allocations, cuBLAS heuristics, graphs
  std::vector<double> rates;
  for (int i = 0; i < w.repeats; ++i) rates.push_back(run_once(w.tokens));
  if (session) session->finish(engine);
  std::sort(rates.begin(), rates.end());
  double median = rates[rates.size() / 2];
  std::printf("  %-5s %10.1f tokens/s   (runs:", mode_name(mode), median);
  for (double r : rates) std::printf(" %.1f", r);
  std::printf(")\n");
  std::fflush(stdout);
  return median;
}

int run() {
  const char* model = std::getenv("LANTERN_BENCH_MODEL");
  if (!model || !*model) {
    std::fprintf(stderr,
                 "bench_harness_overhead: set LANTERN_BENCH_MODEL to a model directory (real "
                 "weights, or `lantern synth --preset llama-3.2-1b --out DIR`)\n");
    return 2;
  }
  Workload w;
  w.model = model;
  const char* backend = std::getenv("LANTERN_BENCH_BACKEND");
  std::string b = backend ? backend : (gpu_usable() ? "cuda" : "cpu");
  LANTERN_CHECK(b == "cuda" || b == "cpu", "LANTERN_BENCH_BACKEND must be cuda or cpu, got '%s'",
                b.c_str());
  w.backend = b == "cuda" ? kernels::Backend::cuda : kernels::Backend::cpu;
  w.batch = static_cast<int>(env_int("LANTERN_BENCH_BATCH", 1));
  w.tokens = static_cast<int>(env_int("LANTERN_BENCH_TOKENS", 256));
  w.repeats = static_cast<int>(env_int("LANTERN_BENCH_REPEATS", 5));
  const char* root = std::getenv("LANTERN_BENCH_RUN_DIR");
  w.run_root = root ? std::filesystem::path(root)
                    : std::filesystem::path(LANTERN_BINARY_DIR) / "bench-runs";

  std::printf("harness overhead: model %s, backend %s, batch %d, %d decode tokens, median of %d\n",
              model, b.c_str(), w.batch, w.tokens, w.repeats);
  std::printf("instrumentation compiled %s (LANTERN_INSTRUMENTATION=%d)\n",
              LANTERN_INSTRUMENTATION ? "in" : "OUT", LANTERN_INSTRUMENTATION);
#if !LANTERN_INSTRUMENTATION
  // Hooks are compiled away: every mode runs the same code. One number.
  double out = measure(w, Mode::none);
  std::printf("compiled out: %.1f tokens/s (compare with `none` of an instrumented build)\n", out);
  return 0;
#else
  double none = measure(w, Mode::none);
  double off = measure(w, Mode::off);
  double on = measure(w, Mode::on);
  double none_again = measure(w, Mode::none);
  double base = 0.5 * (none + none_again);
  std::printf("\nbaseline (mean of the two `none` runs, drift %.2f %%): %.1f tokens/s\n",
              100.0 * (none_again - none) / none, base);
  std::printf("off / none: %.4f   overhead %.2f %%   (goal <= 0.5 %%)\n", off / base,
              100.0 * (1.0 - off / base));
  std::printf("on  / none: %.4f   overhead %.2f %%   (goal <= 3 %%)\n", on / base,
              100.0 * (1.0 - on / base));
  return 0;
#endif
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_harness_overhead: %s\n", e.what());
    return 1;
  }
}
