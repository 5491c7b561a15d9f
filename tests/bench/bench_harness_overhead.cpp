// Harness overhead on decode: tokens/s of the same workload under several
// harness configurations ("modes"), interleaved round by round so that clock
// and host drift hit every mode alike. Every (round, mode) runs in a fresh
// child process: CUPTI, once attached, can slow a process down after it
// stopped collecting, so modes must not share one.
//
//   none      no observer attached (EngineOptions::observer == nullptr)
//   off       a Session attached with every part switched off at run time
//   nvtx | timeline | alias | kv | memory
//             that one part on, nothing recorded
//   cupti     timeline + CUPTI kernel records, recording a run directory
//   record    everything except CUPTI, recording a run directory
//   on        everything on: NVTX, timeline, CUPTI, alias tracker, KV
//             recorder, memory map, recording a run directory; CUPTI in its
//             default schedule (budget windows, CuptiOptions::window_budget)
//   on-all    everything on, CUPTI attached for the whole run (every kernel
//             of every step: --cupti-all-steps)
//   on-budgetPCT
//             everything on, CUPTI budget windows within PCT % of wall time
//   none-after-cupti
//             a short CUPTI-recording session first, stopped, then `none`
//             (does stopping the collector leave the process at full speed?)
//   none-after-none
//             the control for it: a first engine without harness, then `none`
//   on-windowW:P
//             everything on, CUPTI attached for W steps of every P only
//   on-everyN everything on, CUPTI attached throughout, kernel records on
//             every Nth step
//   cupti-graph | cupti-nokernel
//             everything on, CUPTI attached throughout, GRAPH_TRACE instead
//             of kernel records / no kernel records at all
//   MODE/part overhead-study variants of a mode: all|kernel|kmem (kinds the
//             sampling switches), nodriver, noext, nosub, cuptiwclock
//
// and "compiled out": the `none` number of a build configured with
// -DLANTERN_INSTRUMENTATION=OFF (preset no-instrumentation), which this
// program reports as such. Goals (docs/harness.md): on >= 97 %, off >= 99.5 %
// of none.
//
//   LANTERN_BENCH_MODEL=/path/to/model   model directory (required)
//   LANTERN_BENCH_BACKEND=cuda|cpu       default: cuda when a GPU is usable
//   LANTERN_BENCH_BATCH=1                concurrent sequences
//   LANTERN_BENCH_TOKENS=256             decode tokens per sequence
//   LANTERN_BENCH_REPEATS=7              rounds (each mode runs once per round)
//   LANTERN_BENCH_MODES=none,off,on      comma-separated; "all" = every mode above
//   LANTERN_BENCH_RUN_DIR=...            where recording modes write (default: build/bench-runs)
//
//   build/<preset>/bench/bench_harness_overhead
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
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

const char* const kAllModes[] = {"none",   "off",   "nvtx",   "timeline", "alias",    "kv",
                                 "memory", "cupti", "record", "on",       "on-all", "on-every4",
                                 "none-after-cupti", "none-after-none", "cupti-graph",
                                 "cupti-nokernel"};

EngineOptions engine_options(const Workload& w, const ModelConfig& cfg) {
  EngineOptions eo;
  eo.backend = w.backend;
  eo.limits.max_seqs = std::max(w.batch, 1);
  eo.limits.max_context = std::min(cfg.max_position_embeddings, 64 + w.tokens + 16);
  eo.limits.max_batch_tokens = std::max(64 * w.batch, 64);
  eo.limits.kv_memory_fraction = 0.5;
  return eo;
}

// The harness options of a mode; *attach is false for "none".
harness::HarnessOptions options_of(const std::string& full_mode, bool* attach) {
  // MODE[/part...]: parts adjust CUPTI (all|kernel|kmem: what sampling
  // switches off; nodriver: no driver-API records; noext: no external
  // correlation ids).
  std::stringstream split(full_mode);
  std::string mode, part;
  std::getline(split, mode, '/');
  harness::HarnessOptions ho;
  ho.print_summary = false;
  ho.roofline = false;  // measured at finish, outside the timing; not needed here
  *attach = mode != "none" && mode.rfind("none-after-", 0) != 0;
  auto only = [&](bool harness::HarnessOptions::*part) {
    ho.nvtx = ho.cupti = ho.alias = ho.kv = ho.memory = ho.timeline = false;
    if (part) ho.*part = true;
  };
  using H = harness::HarnessOptions;
  static const std::map<std::string, bool H::*> kOnePart = {
      {"nvtx", &H::nvtx}, {"timeline", &H::timeline}, {"alias", &H::alias},
      {"kv", &H::kv},     {"memory", &H::memory}};
  if (mode == "none" || mode == "off" || mode.rfind("none-after-", 0) == 0) {
    only(nullptr);
  } else if (auto part_on = kOnePart.find(mode); part_on != kOnePart.end()) {
    only(part_on->second);
  } else if (mode == "cupti") {
    only(&harness::HarnessOptions::cupti);
    ho.timeline = true;
  } else if (mode == "record") {
    ho.cupti = false;
  } else if (mode == "cupti-graph" || mode == "cupti-nokernel") {
    ho.cupti_config.kernel_kind = mode == "cupti-graph" ? "graph" : "none";
    ho.cupti_config.window_budget = 0;
  } else if (mode == "on") {
  } else if (mode == "on-all") {
    ho.cupti_config.window_budget = 0;
  } else if (mode.rfind("on-budget", 0) == 0) {
    ho.cupti_config.window_budget = std::atof(mode.c_str() + 9) / 100;
    LANTERN_CHECK(ho.cupti_config.window_budget > 0 && ho.cupti_config.window_budget < 1,
                  "mode %s: expected on-budgetPCT with 0 < PCT < 100", mode.c_str());
  } else if (mode.rfind("on-window", 0) == 0) {
    // on-windowW:P -- CUPTI attached for W steps of every P
    LANTERN_CHECK(std::sscanf(mode.c_str() + 9, "%d:%d", &ho.cupti_config.window_steps,
                              &ho.cupti_config.window_period) == 2,
                  "mode %s: expected on-windowW:P", mode.c_str());
  } else if (mode.rfind("on-every", 0) == 0) {
    ho.cupti_config.kernel_every = std::atoi(mode.c_str() + 8);
    ho.cupti_config.window_budget = 0;
    LANTERN_CHECK(ho.cupti_config.kernel_every > 0, "mode %s: expected on-everyN with N > 0", mode.c_str());
  } else {
    std::string all;
    for (const char* m : kAllModes) all += std::string(all.empty() ? "" : ", ") + m;
    LANTERN_FAIL("unknown mode '%s' in LANTERN_BENCH_MODES; known: %s (or all)", mode.c_str(),
                 all.c_str());
  }
  while (std::getline(split, part, '/')) {
    if (part == "all" || part == "kernel") ho.cupti_config.sample_kinds = part;
    else if (part == "kmem") ho.cupti_config.sample_kinds = "kernel+memory";
    else if (part == "nodriver") ho.cupti_config.driver_api = false;
    else if (part == "noext") ho.cupti_config.external_correlation = false;
    else if (part == "nosub") ho.cupti_config.graph_node_callbacks = false;
    else if (part == "cuptiwclock") ho.cupti_config.harness_clock = false;
    else LANTERN_FAIL("mode %s: unknown part '%s'", full_mode.c_str(), part.c_str());
  }
  return ho;
}

struct RunResult {
  double tokens_per_s = 0;
  std::string note;  // recording modes: what the run directory says
};

// One engine, one warm-up, one timed run of the workload under `mode`.
RunResult run_mode(const Workload& w, const std::string& mode, int round) {
  if (mode == "none-after-cupti" || mode == "none-after-none") {
    // A first engine (with a CUPTI-recording session, or without any) that
    // generates a few tokens and is gone before the timed run.
    harness::HarnessOptions ho;
    ho.enabled = mode == "none-after-cupti";
    ho.print_summary = false;
    ho.roofline = false;
    ho.record_dir = w.run_root / strformat("pre-cupti-%d-%lld", round,
                                           static_cast<long long>(std::time(nullptr)));
    std::filesystem::remove_all(ho.record_dir);
    {
      harness::Session session(ho);
      ModelConfig cfg = ModelConfig::load(w.model);
      EngineOptions eo = engine_options(w, cfg);
      session.apply(eo);
      Engine engine(cfg, Weights::load(cfg, w.model, w.backend), eo);
      Request r;
      r.prompt = {1000, 1037, 1074};
      r.max_new_tokens = 8;
      engine.submit(std::move(r));
      engine.run_until_idle();
      session.finish(engine);
    }
    std::filesystem::remove_all(ho.record_dir);
  }
  bool attach = false;
  harness::HarnessOptions ho = options_of(mode, &attach);
  const bool records = mode.rfind("cupti", 0) == 0 || mode.rfind("record", 0) == 0 ||
                       mode.rfind("on", 0) == 0;
  if (attach && records && mode != "off") {
    ho.record_dir = w.run_root / strformat("%s-%d-%lld", mode.c_str(), round,
                                           static_cast<long long>(std::time(nullptr)));
    std::filesystem::remove_all(ho.record_dir);
  }
  std::unique_ptr<harness::Session> session;
  if (attach) session = std::make_unique<harness::Session>(ho);

  ModelConfig cfg = ModelConfig::load(w.model);
  EngineOptions eo = engine_options(w, cfg);
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
  RunResult out;
  out.tokens_per_s = run_once(w.tokens);
  if (session) {
    session->finish(engine);
    if (!session->problems().empty()) out.note = "problems: " + session->problems().front();
    if (session->recording()) {
      std::ifstream f(session->run_dir() / "metrics.json");
      nlohmann::json m = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
      if (m.is_object() && m.contains("harness")) {
        const auto& h = m["harness"];
        out.note += strformat("%s%lld kernel rows, %lld unattributed, %lld CUPTI records, "
                              "%lld steps with kernel records, %lld without, %lld toggles "
                              "taking %.3f ms",
                              out.note.empty() ? "" : "; ", h.value("kernels", 0LL),
                              h.value("unattributed_kernels", 0LL), h.value("cupti_records", 0LL),
                              h.value("cupti_sampled_steps", 0LL), h.value("cupti_skipped_steps", 0LL),
                              h.value("cupti_kernel_toggles", 0LL),
                              h.value("cupti_kernel_toggle_ms", 0.0));
        out.note += strformat(", %lld graph-launch records", h.value("cupti_graph_launches", 0LL));
        if (h.contains("cupti_attach_detach")) {
          const auto& p = h["cupti_attach_detach"];
          out.note += strformat("; %lld attaches %.2f ms, %lld detaches: sync %.2f flush %.2f "
                                "disable %.2f finalize %.2f ms",
                                p.value("attaches", 0LL), p.value("attach_ms", 0.0),
                                p.value("detaches", 0LL), p.value("sync_ms", 0.0),
                                p.value("flush_ms", 0.0), p.value("disable_ms", 0.0),
                                p.value("finalize_ms", 0.0));
        }
      }
      std::filesystem::remove_all(session->run_dir());  // keep the disk clean over many rounds
    }
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> parse_modes(const char* text) {
  std::vector<std::string> modes;
  std::string s = text && *text ? text : "none,off,on";
  if (s == "all") return {std::begin(kAllModes), std::end(kAllModes)};
  std::stringstream ss(s);
  for (std::string m; std::getline(ss, m, ',');)
    if (!m.empty()) modes.push_back(m);
  bool unused = false;
  for (const std::string& m : modes) (void)options_of(m, &unused);  // validate before running
  if (std::find(modes.begin(), modes.end(), "none") == modes.end()) modes.insert(modes.begin(), "none");
  return modes;
}

// Child: one mode, one round; prints "RESULT <tokens/s>\t<note>".
int run_child(const Workload& w, const std::string& mode, int round) {
  RunResult r = run_mode(w, mode, round);
  std::printf("RESULT %.3f\t%s\n", r.tokens_per_s, r.note.c_str());
  return 0;
}

// Parent: runs `mode` in a fresh process of this program.
RunResult spawn(const std::string& mode, int round) {
  std::string cmd = strformat("'/proc/%d/exe' --child %s %d 2>&1", static_cast<int>(getpid()),
                              mode.c_str(), round);
  FILE* p = popen(cmd.c_str(), "r");
  LANTERN_CHECK(p != nullptr, "cannot start a child process (%s)", cmd.c_str());
  std::string output, line;
  char buf[4096];
  RunResult r;
  bool found = false;
  while (std::fgets(buf, sizeof buf, p)) {
    output += buf;
    std::string l = buf;
    if (l.rfind("RESULT ", 0) == 0) {
      r.tokens_per_s = std::strtod(l.c_str() + 7, nullptr);
      auto tab = l.find('\t');
      if (tab != std::string::npos) r.note = l.substr(tab + 1, l.size() - tab - 2);
      found = true;
    }
  }
  int status = pclose(p);
  LANTERN_CHECK(found && status == 0, "mode %s (round %d) failed (exit status %d):\n%s",
                mode.c_str(), round, status, output.c_str());
  return r;
}

Workload workload_from_env(const char* model) {
  Workload w;
  w.model = model;
  const char* backend = std::getenv("LANTERN_BENCH_BACKEND");
  std::string b = backend ? backend : (gpu_usable() ? "cuda" : "cpu");
  LANTERN_CHECK(b == "cuda" || b == "cpu", "LANTERN_BENCH_BACKEND must be cuda or cpu, got '%s'",
                b.c_str());
  w.backend = b == "cuda" ? kernels::Backend::cuda : kernels::Backend::cpu;
  w.batch = static_cast<int>(env_int("LANTERN_BENCH_BATCH", 1));
  w.tokens = static_cast<int>(env_int("LANTERN_BENCH_TOKENS", 256));
  w.repeats = static_cast<int>(env_int("LANTERN_BENCH_REPEATS", 7));
  const char* root = std::getenv("LANTERN_BENCH_RUN_DIR");
  w.run_root = root ? std::filesystem::path(root)
                    : std::filesystem::path(LANTERN_BINARY_DIR) / "bench-runs";
  return w;
}

int run(int argc, char** argv) {
  const char* model = std::getenv("LANTERN_BENCH_MODEL");
  if (!model || !*model) {
    std::fprintf(stderr,
                 "bench_harness_overhead: set LANTERN_BENCH_MODEL to a model directory (real "
                 "weights, or `lantern synth --preset llama-3.2-1b --out DIR`)\n");
    return 2;
  }
  if (argc == 4 && std::string(argv[1]) == "--child") {
    Workload w = workload_from_env(model);
    return run_child(w, argv[2], std::atoi(argv[3]));
  }
  Workload w = workload_from_env(model);
  const std::string b = kernels::backend_name(w.backend);
  std::printf("harness overhead: model %s, backend %s, batch %d, %d decode tokens, %d rounds\n",
              model, b.c_str(), w.batch, w.tokens, w.repeats);
  std::printf("instrumentation compiled %s (LANTERN_INSTRUMENTATION=%d)\n",
              LANTERN_INSTRUMENTATION ? "in" : "OUT", LANTERN_INSTRUMENTATION);
#if !LANTERN_INSTRUMENTATION
  // Hooks are compiled away: every mode runs the same code. One number.
  std::vector<std::string> modes = {"none"};
#else
  std::vector<std::string> modes = parse_modes(std::getenv("LANTERN_BENCH_MODES"));
#endif
  std::map<std::string, std::vector<double>> rates;
  std::map<std::string, std::string> notes;
  for (int round = 0; round < w.repeats; ++round) {
    // Rotate the order each round so no mode always runs first (or right after
    // a recording mode's finish).
    for (size_t i = 0; i < modes.size(); ++i) {
      const std::string& m = modes[(i + round) % modes.size()];
      RunResult r = spawn(m, round);
      rates[m].push_back(r.tokens_per_s);
      if (!r.note.empty()) notes[m] = r.note;
    }
  }
  const double none = median(rates["none"]);
  // Paired: each round's rate over the same round's `none`, median over rounds.
  auto paired = [&](const std::string& m) {
    std::vector<double> r;
    for (size_t i = 0; i < rates[m].size(); ++i) r.push_back(rates[m][i] / rates["none"][i]);
    return median(r);
  };
  std::printf("\n%-16s %12s %9s %9s %9s   runs (tokens/s, in round order)\n", "mode",
              "median tok/s", "vs none", "paired", "overhead");
  for (const std::string& m : modes) {
    double med = median(rates[m]);
    std::printf("%-16s %12.1f %9.4f %9.4f %8.2f%%  ", m.c_str(), med, med / none, paired(m),
                100.0 * (1.0 - paired(m)));
    for (double r : rates[m]) std::printf(" %.1f", r);
    std::printf("\n");
  }
  const auto& nr = rates["none"];
  auto [lo, hi] = std::minmax_element(nr.begin(), nr.end());
  std::printf("\nnone spread over rounds: %.2f %% (min %.1f, max %.1f)\n", 100.0 * (*hi - *lo) / none,
              *lo, *hi);
#if !LANTERN_INSTRUMENTATION
  std::printf("compiled out: %.1f tokens/s (compare with `none` of an instrumented build)\n", none);
#else
  for (const auto& [m, note] : notes) std::printf("%s: %s\n", m.c_str(), note.c_str());
  // "overhead" is the paired median: drift between rounds cancels.
  if (rates.count("off"))
    std::printf("off / none: %.4f   overhead %.2f %%   (goal <= 0.5 %%)\n", paired("off"),
                100.0 * (1.0 - paired("off")));
  if (rates.count("on"))
    std::printf("on  / none: %.4f   overhead %.2f %%   (goal <= 3 %%)\n", paired("on"),
                100.0 * (1.0 - paired("on")));
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_harness_overhead: %s\n", e.what());
    return 1;
  }
}
