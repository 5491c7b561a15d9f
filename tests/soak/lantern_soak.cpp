// lantern_soak: a long run under continuous batching with preemption forced
// by a small KV pool (issue 15). Requests of random prompt and output lengths
// arrive at random (Poisson) times from a producer thread while the engine
// thread steps. At the end:
//   - every request finished exactly once, with its full output;
//   - preemption happened (the pool was too small on purpose);
//   - every KV block is back in the pool (the observer's last step stats);
//   - device memory was flat after warm-up (cudaMemGetInfo every 50 steps);
//   - no device bytes leaked (free memory before the engine == after it);
//   - for every --solo-every'th request, teacher-forced solo scoring of its
//     prompt + output agrees with each generated (greedy) token wherever the
//     solo top-1 margin exceeds --tolerance (docs/engine-verification.md:
//     0.25 logits).
// Prints one line per check and a JSON report (--out); exit 0 when all pass,
// 1 with the failed checks otherwise. Docs: docs/reliability.md.
#include <cstdlib>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "tests/engine/kv_watch.h"

namespace lantern {
namespace {

struct Options {
  std::string model, out;
  kernels::Backend backend = kernels::Backend::cuda;
  int requests = 10000;
  uint64_t seed = 1;
  int max_seqs = 32, max_batch_tokens = 2048, max_context = 1024;
  int kv_blocks = 0;         // 0: room for max_seqs/8 full-context sequences
  int prompt_min = 4, prompt_max = 384, gen_min = 1, gen_max = 64;
  double rate = 250;         // mean arrivals per second (Poisson)
  int solo_every = 50;       // teacher-forced solo check of every Nth request
  double tolerance = 0.25;   // logits: top-1 margin under which a disagreement is a near-tie
  int warmup_steps = 1000;   // memory samples after this many steps must be flat (decode graphs
                             // for every batch size are captured by then)
  long long leak_tolerance = 0;  // bytes
};

void usage() {
  std::fprintf(stderr,
               "usage: lantern_soak --model DIR [--device cuda|cpu] [--requests 10000] [--seed 1]\n"
               "  [--max-seqs 32] [--max-batch-tokens 2048] [--max-context 1024] [--kv-blocks 0=auto]\n"
               "  [--prompt-min 4] [--prompt-max 384] [--gen-min 1] [--gen-max 64] [--rate 250]\n"
               "  [--solo-every 50] [--tolerance 0.25] [--warmup-steps 1000] [--leak-tolerance 0]\n"
               "  [--out report.json]\n"
               "example: lantern_soak --model models/llama-3.2-1b --requests 10000 --out soak.json\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(), std::exit(0);
    LANTERN_CHECK(i + 1 < argc, "option %s needs a value", k.c_str());
    std::string v = argv[++i];
    auto num = [&](long lo, long hi) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      LANTERN_CHECK(end && !*end && x >= lo && x <= hi, "option %s expects an integer in [%ld, %ld], got '%s'",
                    k.c_str(), lo, hi, v.c_str());
      return static_cast<int>(x);
    };
    auto real = [&] {
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      LANTERN_CHECK(end && !*end && std::isfinite(x) && x >= 0, "option %s expects a number >= 0, got '%s'",
                    k.c_str(), v.c_str());
      return x;
    };
    if (k == "--model") o.model = v;
    else if (k == "--out") o.out = v;
    else if (k == "--device") {
      LANTERN_CHECK(v == "cuda" || v == "cpu", "--device expects cuda or cpu, got '%s'", v.c_str());
      o.backend = v == "cuda" ? kernels::Backend::cuda : kernels::Backend::cpu;
    } else if (k == "--requests") o.requests = num(1, 10000000);
    else if (k == "--seed") o.seed = static_cast<uint64_t>(num(0, 2147483647));
    else if (k == "--max-seqs") o.max_seqs = num(1, 4096);
    else if (k == "--max-batch-tokens") o.max_batch_tokens = num(1, 1 << 20);
    else if (k == "--max-context") o.max_context = num(2, 1 << 20);
    else if (k == "--kv-blocks") o.kv_blocks = num(0, 1 << 30);
    else if (k == "--prompt-min") o.prompt_min = num(1, 1 << 20);
    else if (k == "--prompt-max") o.prompt_max = num(1, 1 << 20);
    else if (k == "--gen-min") o.gen_min = num(1, 1 << 20);
    else if (k == "--gen-max") o.gen_max = num(1, 1 << 20);
    else if (k == "--rate") o.rate = real();
    else if (k == "--solo-every") o.solo_every = num(0, 1 << 30);
    else if (k == "--tolerance") o.tolerance = real();
    else if (k == "--warmup-steps") o.warmup_steps = num(0, 1 << 30);
    else if (k == "--leak-tolerance") o.leak_tolerance = num(0, 2147483647);
    else LANTERN_FAIL("unknown option %s (see --help)", k.c_str());
  }
  LANTERN_CHECK(!o.model.empty(), "missing required option --model");
  LANTERN_CHECK(o.prompt_min <= o.prompt_max && o.gen_min <= o.gen_max, "min lengths exceed max lengths");
  LANTERN_CHECK(o.prompt_max + o.gen_max + 1 < o.max_context,
                "--prompt-max + --gen-max + 1 must stay below --max-context (solo scoring feeds the output back)");
  return o;
}

size_t device_free_bytes(kernels::Backend b) {
  if (b != kernels::Backend::cuda) return 0;
  size_t free_b = 0, total_b = 0;
  cudaDeviceSynchronize();
  LANTERN_CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess, "cudaMemGetInfo failed");
  return free_b;
}

// A first engine loads what stays loaded for the life of the process: the
// kernels' modules (CUDA loads them lazily, at first launch, and never
// unloads them) and cuBLAS's. Without this pass the soak engine's leak check
// would count ~44 MiB of module code as leaked (measured on the H200).
void warm_up_process(const ModelConfig& cfg, const Options& o, const EngineLimits& lim) {
  EngineLimits small = lim;
  small.kv_num_blocks = cfg.num_layers * ((o.max_context + lim.kv_block_size - 1) / lim.kv_block_size) *
                        std::max(1, std::min(o.max_seqs, 4));
  EngineOptions opt;
  opt.backend = o.backend;
  opt.limits = small;
  Engine engine(cfg, Weights::load(cfg, o.model, o.backend), opt);
  const int n = std::max(4, std::min(o.max_seqs, 4));
  for (int i = 0; i < n; ++i) {  // greedy and sampled, prefill and decode
    Request r;
    r.prompt.assign(static_cast<size_t>(o.prompt_min + i), 1000 + i);
    r.max_new_tokens = 4;
    r.stop_at_eos = false;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.top_p = 0.95f;
    r.sampling.top_k = i == 3 ? 40 : 0;
    engine.submit(std::move(r));
  }
  engine.run_until_idle();
  (void)engine.take_finished();
}

struct Planned {
  std::vector<int32_t> prompt;
  int max_new = 0;
  double arrival_s = 0;
};

std::vector<Planned> plan(const Options& o, int vocab) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::uniform_int_distribution<int> plen(o.prompt_min, o.prompt_max), glen(o.gen_min, o.gen_max);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  std::vector<Planned> out(o.requests);
  double t = 0;
  for (auto& p : out) {
    p.prompt.resize(plen(rng));
    for (auto& x : p.prompt) x = tok(rng);
    p.max_new = glen(rng);
    if (o.rate > 0) t += gap(rng);
    p.arrival_s = t;
  }
  return out;
}

struct SoloStats {
  long long checked = 0, agree = 0, near_ties = 0, disagreements = 0;
  double smallest_disagreement_margin = INFINITY;
};

// Teacher-forced solo scoring of prompt + output; compares each generated
// token with the solo argmax at the position before it.
void solo_check(Engine& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen,
                double tol, SoloStats& st) {
  const int vocab = e.config().vocab_size;
  const int first = static_cast<int>(prompt.size()) - 1;
  Request r;
  r.prompt = prompt;
  r.forced_tokens = gen;
  r.max_new_tokens = static_cast<int>(gen.size()) + 1;
  r.stop_at_eos = false;
  r.all_logits = true;
  r.on_logits = [&](int64_t, int pos, const float* row) {
    const int i = pos - first;
    if (i < 0 || i >= static_cast<int>(gen.size())) return;
    int best = 0;
    for (int v = 1; v < vocab; ++v)
      if (row[v] > row[best]) best = v;
    float second = -INFINITY;
    for (int v = 0; v < vocab; ++v)
      if (v != best) second = std::max(second, row[v]);
    const double margin = double(row[best]) - second;
    ++st.checked;
    if (best == gen[i]) ++st.agree;
    else if (margin <= tol) ++st.near_ties;
    else {
      ++st.disagreements;
      st.smallest_disagreement_margin = std::min(st.smallest_disagreement_margin, margin);
    }
  };
  e.submit(std::move(r));
  e.run_until_idle();
  e.take_finished();
}

// The leak check: an engine must give back every byte it took. The soak
// engine's own before/after difference also holds one-time growth of the
// CUDA context (the local-memory reservation grows when a kernel needing more
// stack first launches, and is never shrunk), so the check runs one more
// engine of the same limits on the same kind of work after the soak and
// compares free memory before and after it: a leak repeats per engine, a
// one-time growth does not.
size_t rerun_engine(const ModelConfig& cfg, const Options& o, const EngineLimits& lim,
                    const std::vector<Planned>& work, size_t* free_after) {
  const size_t before = device_free_bytes(o.backend);
  {
    EngineOptions opt;
    opt.backend = o.backend;
    opt.limits = lim;
    Engine engine(cfg, Weights::load(cfg, o.model, o.backend), opt);
    const size_t n = std::min<size_t>(work.size(), 2 * static_cast<size_t>(o.max_seqs));
    for (size_t i = 0; i < n; ++i) {
      Request r;
      r.prompt = work[i].prompt;
      r.max_new_tokens = work[i].max_new;
      r.stop_at_eos = false;
      engine.submit(std::move(r));
    }
    engine.run_until_idle();
    (void)engine.take_finished();
  }
  *free_after = device_free_bytes(o.backend);
  return before;
}

// The soak's limits: a KV pool of room for max_seqs/8 full-context sequences
// (unless --kv-blocks), so preemption is forced.
EngineLimits soak_limits(const ModelConfig& cfg, const Options& o) {
  EngineLimits lim;
  lim.max_seqs = o.max_seqs;
  lim.max_batch_tokens = o.max_batch_tokens;
  lim.max_context = o.max_context;
  lim.max_queue = o.requests + 1;
  lim.logits_rows = std::min(o.max_batch_tokens, 256);
  const int blocks_per_seq = (o.max_context + lim.kv_block_size - 1) / lim.kv_block_size;
  lim.kv_num_blocks = o.kv_blocks ? o.kv_blocks : cfg.num_layers * blocks_per_seq * std::max(1, o.max_seqs / 8);
  return lim;
}

struct Clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

// What the engine thread saw while the producer submitted the work.
struct Drive {
  std::vector<int64_t> ids;  // per planned request
  std::vector<RequestResult> done;
  std::vector<size_t> mem_samples;  // device free bytes every 50 steps after warm-up
  int64_t steps = 0;
};

// A producer thread submits each request at its arrival time; this thread
// steps until the producer is done and the engine idle.
Drive drive(Engine& engine, const std::vector<Planned>& work, const Options& o, const Clock& clock) {
  Drive d;
  d.ids.assign(work.size(), -1);
  std::atomic<bool> producer_done{false};
  const double t0 = engine.now_s();
  std::thread producer([&] {
    for (size_t i = 0; i < work.size(); ++i) {
      const double wait = work[i].arrival_s - (engine.now_s() - t0);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      Request r;
      r.prompt = work[i].prompt;
      r.max_new_tokens = work[i].max_new;
      r.stop_at_eos = false;
      r.tag = std::to_string(i);
      d.ids[i] = engine.submit(std::move(r));
    }
    producer_done = true;
  });
  double last_progress = 0;
  while (!producer_done || !engine.idle()) {
    if (!engine.step()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    ++d.steps;
    for (auto& r : engine.take_finished()) d.done.push_back(std::move(r));
    if (d.steps >= o.warmup_steps && d.steps % 50 == 0) d.mem_samples.push_back(device_free_bytes(o.backend));
    if (clock.seconds() - last_progress > 5) {
      last_progress = clock.seconds();
      std::fprintf(stderr, "soak: %6.1f s  %zu/%d finished, step %lld\n", clock.seconds(), d.done.size(),
                   o.requests, static_cast<long long>(d.steps));
    }
  }
  producer.join();
  for (auto& r : engine.take_finished()) d.done.push_back(std::move(r));
  return d;
}

// Completion, KV blocks and memory flatness; failures appended, figures returned.
nlohmann::json check_completion(const Drive& d, const std::vector<Planned>& work, const test::KvWatch& kv,
                                std::vector<std::string>& failures) {
  std::set<int64_t> seen;
  long long tokens = 0, preemptions = 0, short_outputs = 0;
  std::map<int64_t, const RequestResult*> by_id;
  for (const auto& r : d.done) {
    if (!seen.insert(r.id).second) failures.push_back(strformat("request %lld finished twice", (long long)r.id));
    by_id[r.id] = &r;
    tokens += static_cast<long long>(r.tokens.size());
    preemptions += r.preemptions;
  }
  for (size_t i = 0; i < work.size(); ++i) {
    auto it = by_id.find(d.ids[i]);
    if (it == by_id.end()) continue;
    if (static_cast<int>(it->second->tokens.size()) != work[i].max_new || it->second->finish_reason != "length")
      ++short_outputs;
  }
  if (seen.size() != work.size())
    failures.push_back(strformat("%zu of %zu requests finished", seen.size(), work.size()));
  if (short_outputs) failures.push_back(strformat("%lld outputs shorter than asked", short_outputs));
  if (preemptions == 0) failures.push_back("no preemption: the KV pool was not small enough");
  if (kv.last.used_blocks != 0 || kv.last.free_blocks != kv.last.total_blocks)
    failures.push_back(strformat("KV blocks leaked: %d used, %d free of %d after the last step",
                                 kv.last.used_blocks, kv.last.free_blocks, kv.last.total_blocks));
  long long mem_spread = 0;
  if (!d.mem_samples.empty()) {
    auto [lo, hi] = std::minmax_element(d.mem_samples.begin(), d.mem_samples.end());
    mem_spread = static_cast<long long>(*hi - *lo);
    if (mem_spread > 0)
      failures.push_back(strformat("device memory not flat after warm-up: free memory varied by %lld bytes "
                                   "over %zu samples", mem_spread, d.mem_samples.size()));
  }
  return {{"finished", seen.size()},
          {"generated_tokens", tokens},
          {"steps", d.steps},
          {"preemptions", preemptions},
          {"kv_blocks_total", kv.last.total_blocks},
          {"kv_blocks_used_at_end", kv.last.used_blocks},
          {"kv_blocks_max_used", kv.max_used},
          {"memory_samples", d.mem_samples.size()},
          {"device_free_spread_bytes", mem_spread}};
}

// Solo agreement on every --solo-every'th request.
nlohmann::json check_solo(Engine& engine, const Drive& d, const std::vector<Planned>& work, const Options& o,
                          std::vector<std::string>& failures) {
  std::map<int64_t, const RequestResult*> by_id;
  for (const auto& r : d.done) by_id[r.id] = &r;
  SoloStats solo;
  const Clock clock;
  if (o.solo_every > 0)
    for (size_t i = 0; i < work.size(); i += static_cast<size_t>(o.solo_every)) {
      auto it = by_id.find(d.ids[i]);
      if (it != by_id.end()) solo_check(engine, work[i].prompt, it->second->tokens, o.tolerance, solo);
    }
  if (solo.disagreements)
    failures.push_back(strformat("%lld of %lld greedy tokens disagree with solo scoring at margin > %.2f "
                                 "(smallest such margin %.3f)",
                                 solo.disagreements, solo.checked, o.tolerance,
                                 solo.smallest_disagreement_margin));
  return {{"solo_requests", o.solo_every > 0 ? (work.size() + o.solo_every - 1) / o.solo_every : 0},
          {"solo_tokens_checked", solo.checked},
          {"solo_agree", solo.agree},
          {"solo_near_ties", solo.near_ties},
          {"solo_disagreements_above_tolerance", solo.disagreements},
          {"solo_seconds", clock.seconds()},
          {"tolerance_logits", o.tolerance}};
}

int run(const Options& o) {
  const Clock clock;
  ModelConfig cfg = ModelConfig::load(o.model);
  const EngineLimits lim = soak_limits(cfg, o);
  warm_up_process(cfg, o, lim);
  const size_t free_before = device_free_bytes(o.backend);
  nlohmann::json report = {{"requests", o.requests}};
  std::vector<std::string> failures;
  {
    test::KvWatch kv;
    EngineOptions opt;
    opt.backend = o.backend;
    opt.limits = lim;
    opt.observer = &kv;
    Engine engine(cfg, Weights::load(cfg, o.model, o.backend), opt);
    std::vector<Planned> work = plan(o, cfg.vocab_size);
    std::fprintf(stderr, "soak: %d requests, prompts %d-%d, outputs %d-%d tokens, %.0f req/s, KV pool %d blocks\n",
                 o.requests, o.prompt_min, o.prompt_max, o.gen_min, o.gen_max, o.rate, lim.kv_num_blocks);
    const Drive d = drive(engine, work, o, clock);
    const double soak_s = clock.seconds();
    report.update(check_completion(d, work, kv, failures));
    report["soak_seconds"] = soak_s;
    report["tokens_per_s"] = report["generated_tokens"].get<double>() / std::max(soak_s, 1e-9);
    report.update(check_solo(engine, d, work, o, failures));
    report["limits"] = lim.to_json();
  }
  const size_t free_after_soak = device_free_bytes(o.backend);
  size_t free_after = 0;
  const size_t free_before_rerun = rerun_engine(cfg, o, lim, plan(o, cfg.vocab_size), &free_after);
  report["device_bytes_not_returned_by_soak_engine"] =
      static_cast<long long>(free_before) - static_cast<long long>(free_after_soak);  // incl. one-time growth
  const long long leaked = static_cast<long long>(free_before_rerun) - static_cast<long long>(free_after);
  report["device_bytes_leaked"] = leaked;  // by the second engine of the same limits
  if (leaked > o.leak_tolerance)
    failures.push_back(strformat("%lld device bytes not returned by a second engine of the same limits after it was destroyed", leaked));
  report["failures"] = failures;
  report["total_seconds"] = clock.seconds();
  std::printf("%s\n", report.dump(1).c_str());
  if (!o.out.empty()) std::ofstream(o.out) << report.dump(1) << "\n";
  for (const auto& f : failures) std::fprintf(stderr, "soak: FAILED: %s\n", f.c_str());
  if (failures.empty()) std::fprintf(stderr, "soak: all checks passed in %.1f s\n", clock.seconds());
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace lantern

int main(int argc, char** argv) {
  // Load every kernel module when the CUDA context is created, not at each
  // kernel's first launch: otherwise the first launch of a kernel the soak
  // engine alone uses (a cuBLAS GEMM for a batch shape the warm-up did not
  // hit) adds its module's device memory during the run and the leak check
  // counts it (measured: 2 MiB with lazy loading after the warm-up pass).
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  try {
    return lantern::run(lantern::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lantern_soak: error: %s\n", e.what());
    return 1;
  }
}
