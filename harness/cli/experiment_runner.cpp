#include "harness/cli/experiment_runner.h"
#include "harness/cli/tp_launch.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>

#include "engine/device.h"
#include "engine/synth.h"
#include "engine/tokenizer/tokenizer.h"
#include "harness/experiment/content_hash.h"
#include "harness/experiment/schema.h"
#include "harness/experiment/serving.h"
#include "harness/experiment/workload.h"
#include "harness/harness_options.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/summary.h"
#include "harness/serving_driver.h"
#include "harness/session.h"

namespace lantern::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using experiment::Experiment;

struct ModelChoice {
  fs::path dir;
  std::string preset;  // "" for a model directory
};

kernels::Backend resolve_backend(const Experiment& e) {
  const std::string d = e.resolved["device"];
  if (d == "cpu") return kernels::Backend::cpu;
  if (d == "cuda") {
    std::string why;
    LANTERN_CHECK(Device::cuda_available(&why),
                  "%s: $.device: cuda was asked for but no GPU is usable (%s) "
                  "(fix: set \"device\": \"cpu\" or \"auto\")",
                  e.file.c_str(), why.c_str());
    return kernels::Backend::cuda;
  }
  return Device::cuda_available() ? kernels::Backend::cuda : kernels::Backend::cpu;
}

ModelChoice resolve_model(const Experiment& e, kernels::Backend backend, bool quiet) {
  const json& m = e.resolved["model"];
  if (!m["path"].is_null()) {
    fs::path dir = m["path"].get<std::string>();
    LANTERN_CHECK(fs::exists(dir / "config.json"),
                  "%s: $.model.path: %s has no config.json (fix: point it at an "
                  "HF model directory)",
                  e.file.c_str(), dir.c_str());
    return {dir, ""};
  }
  std::string preset = m["preset"];
  if (preset == "auto") preset = backend == kernels::Backend::cuda ? "llama-3.2-1b" : "tiny";
  const uint64_t seed = m["seed"];
  fs::path dir =
      fs::path(m["cache_dir"].get<std::string>()) / (preset + "-seed" + std::to_string(seed));
  if (!fs::exists(dir / "model.safetensors")) {
    if (!quiet)
      std::fprintf(stderr, "lantern: synthesising %s (seed %llu) into %s (once)\n", preset.c_str(),
                   static_cast<unsigned long long>(seed), dir.c_str());
    SynthOptions so;
    so.seed = seed;
    write_synthetic_model(synth_preset(preset), dir, so);
  }
  return {dir, preset};
}

// {family: [{"variant": N, "name": "..."}]}: the registry's variants on
// `backend`, what check_against validates `kernels` with. Recorded in the
// manifest (run format 1.3) so a viewer without CUDA can offer and check them.
json registry_variants(kernels::Backend backend) {
  json out = json::object();
  const auto& reg = kernels::Registry::global();
  for (int i = 0; i < kernels::kNumFamilies; ++i) {
    auto fam = static_cast<kernels::Family>(i);
    json& list = out[kernels::family_name(fam)] = json::array();
    for (const kernels::KernelEntry* k : reg.variants(fam))
      if (k->backend == backend) list.push_back({{"variant", k->variant}, {"name", k->name}});
  }
  return out;
}

experiment::ModelFacts model_facts(const ModelConfig& cfg, kernels::Backend backend) {
  return experiment::model_facts_from(registry_variants(backend), cfg.max_position_embeddings);
}

EngineLimits limits_of(const Experiment& e, const ModelConfig& cfg) {
  EngineLimits l = EngineLimits::from_json(e.resolved["limits"]);
  if (cfg.max_position_embeddings > 0 && l.max_context > cfg.max_position_embeddings)
    l.max_context = cfg.max_position_embeddings;  // only reached at the default (check_against)
  try {
    l.validate(cfg);
  } catch (const Error& err) {
    LANTERN_FAIL("%s: $.limits: %s", e.file.c_str(), err.what());
  }
  return l;
}

experiment::TextEncoder encoder_of(const std::optional<Tokenizer>& tok) {
  experiment::TextEncoder enc;
  if (!tok) return enc;
  const Tokenizer* t = &*tok;
  auto msgs = [](const std::vector<std::pair<std::string, std::string>>& m) {
    std::vector<ChatMessage> out;
    for (const auto& [role, content] : m) out.push_back({role, content});
    return out;
  };
  enc.encode = [t](const std::string& text) {
    std::vector<int32_t> ids = t->encode(text);
    if (auto bos = t->bos_id()) ids.insert(ids.begin(), *bos);
    return ids;
  };
  enc.encode_chat = [t, msgs](const auto& m) { return t->encode_chat(msgs(m)); };
  enc.render_chat = [t, msgs](const auto& m) { return t->render_chat(msgs(m)); };
  return enc;
}

harness::HarnessOptions harness_options_of(const Experiment& e, const fs::path& dir, bool quiet) {
  const json& h = e.resolved["harness"];
  std::map<std::string, std::string> values;
  std::set<std::string> flags;
  if (h["record"].get<bool>()) values["--record"] = dir.string();
  values["--name"] = e.name();
  values["--harness"] = h["enabled"].get<bool>() ? "on" : "off";
  for (const char* k : {"nvtx", "cupti", "alias", "kv", "memory", "roofline"})
    if (!h[k].get<bool>()) flags.insert(std::string("--no-") + k);
  if (h["cupti_all_steps"].get<bool>()) flags.insert("--cupti-all-steps");
  values["--cupti-budget"] = strformat("%g", h["cupti_budget_pct"].get<double>());
  if (h["cupti_every"].get<int>() > 1)
    values["--cupti-every"] = std::to_string(h["cupti_every"].get<int>());
  if (!h["cupti_window"].get<std::string>().empty()) values["--cupti-window"] = h["cupti_window"];
  if (!h["profile_steps"].get<std::string>().empty())
    values["--profile-steps"] = h["profile_steps"];
  try {
    harness::HarnessOptions o = harness::harness_options_from(values, flags);
    o.print_summary = !quiet;
    return o;
  } catch (const Error& err) {
    LANTERN_FAIL("%s: $.harness: %s", e.file.c_str(), err.what());
  }
}

// "\r"-refreshed on a terminal, a line every few seconds otherwise; silent
// for the first second.
class ProgressLine {
 public:
  ProgressLine(std::string label, int64_t total_tokens, bool quiet)
      : label_(std::move(label)), total_tokens_(total_tokens), quiet_(quiet), tty_(isatty(2)) {}
  void update(const harness::DriveProgress& p) {
    if (quiet_ || p.elapsed_s < 1.0 || p.elapsed_s - last_ < (tty_ ? 0.2 : 5.0)) return;
    last_ = p.elapsed_s;
    const double rate = p.tokens / p.elapsed_s;
    const double eta = rate > 0 ? (total_tokens_ - p.tokens) / rate : 0;
    std::fprintf(stderr, "%s%s: %zu/%zu requests, %.0f tokens/s, ETA %.0f s%s", tty_ ? "\r" : "",
                 label_.c_str(), p.done, p.total, rate, std::max(0.0, eta), tty_ ? "   " : "\n");
    shown_ = true;
  }
  ~ProgressLine() {
    if (shown_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  int64_t total_tokens_;
  bool quiet_, tty_;
  bool shown_ = false;
  double last_ = 0;
};

json repetition_metrics(const harness::DriveResult& r) {
  json m = experiment::serving_metrics(r.timings);
  m["step_range"] = {r.first_step, r.end_step};
  m["engine_steps"] = r.end_step - r.first_step;
  return m;
}

int64_t total_tokens(const std::vector<experiment::WorkItem>& items) {
  int64_t n = 0;
  for (const auto& w : items) n += w.max_new_tokens;
  return n;
}

void write_workload(const fs::path& file, const std::vector<experiment::WorkItem>& items) {
  std::ofstream out(file);
  LANTERN_CHECK(out, "cannot write --workload-out %s", file.c_str());
  for (const auto& w : items) out << w.to_json().dump() << "\n";
}

void print_metrics_line(const json& summary) {
  auto med = [&](const char* k) {
    return summary.contains(k) ? summary[k]["median"].get<double>() : 0.0;
  };
  std::printf(
      "metrics (median): %.1f output tokens/s, %.2f requests/s, TTFT p50 %.2f ms p99 %.2f ms, "
      "TPOT p50 %.3f ms, ITL p99 %.3f ms, E2E p50 %.1f ms, admission wait p50 %.2f ms\n",
      med("output_throughput"), med("request_throughput"), med("ttft_ms.p50"), med("ttft_ms.p99"),
      med("tpot_ms.p50"), med("itl_ms.p99"), med("e2e_ms.p50"), med("admission_wait_ms.p50"));
}

void print_run_summary(const fs::path& dir) {
  runfmt::Run run = runfmt::RunReader::open(dir, runfmt::ReadOptions{false});
  auto rows = runfmt::summarize(run.kernels, runfmt::GroupBy::op);
  std::printf("top ops by kernel time (%s timing):\n",
              run.kernels.empty() ? "no" : run.kernels.front().source.c_str());
  for (size_t i = 0; i < rows.size() && i < 5; ++i)
    std::printf("  %-20s %-26s %6.1f%%  %9.2f us/call\n", rows[i].key.c_str(),
                (rows[i].family + "." + rows[i].variant_name).c_str(), 100 * rows[i].share,
                rows[i].mean_us);
  std::printf("alias plan: %lld violations, %lld stale-read warnings\n",
              static_cast<long long>(run.memory.violation_count),
              static_cast<long long>(run.memory.warning_count));
  std::printf("kv cache: peak %d / %d blocks, %zu leaked, %zu errors\n", run.kv.peak_used_blocks,
              run.kv.total_blocks, run.kv.leaked_blocks.size(), run.kv.errors.size());
  std::printf("next: lantern inspect %s   |   lantern-view %s   |   lantern rerun %s\n",
              dir.c_str(), dir.c_str(), dir.c_str());
}

json experiment_section(const Experiment& e, const ModelChoice& model, kernels::Backend backend) {
  json overrides = json::array();
  for (const auto& o : e.overrides) overrides.push_back(o.text);
  return {{"file", e.file},
          {"base_dir", e.base_dir.string()},
          {"schema_version", experiment::kSchemaVersion},
          {"resolved", e.resolved},
          {"overrides", overrides},
          {"kernel_variants", registry_variants(backend)},
          {"effective",
           {{"device", kernels::backend_name(backend)},
            {"model_dir", model.dir.string()},
            {"preset", model.preset}}}};
}

json hashes_of(const fs::path& model_dir) {
  json h = {{"algorithm", "lantern-mix64"}, {"weights", experiment::hash_weights(model_dir)}};
  h["tokenizer"] = fs::exists(model_dir / "tokenizer.json")
                       ? json(experiment::hash_file(model_dir / "tokenizer.json"))
                       : json(nullptr);
  return h;
}

}  // namespace

std::vector<experiment::Override> overrides_from(const std::vector<std::string>& sets) {
  std::vector<experiment::Override> out;
  for (const std::string& s : sets) out.push_back(experiment::parse_override(s));
  return out;
}

fs::path default_run_dir(const std::string& name, const std::string& suffix) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  fs::path dir = fs::path("runs") / (std::string(buf) + "-" + name + suffix);
  for (int i = 2; fs::exists(dir); ++i)
    dir = fs::path("runs") / (std::string(buf) + "-" + name + suffix + "-" + std::to_string(i));
  return dir;
}

namespace {

// `lantern run --tp N` (start_tp_group): the LM head and all_reduce choices
// into the engine options; the followers record into DIR/rank-R with the
// default harness options (the experiment's harness section is rank 0's)
// and, on rerun, pin their recorded GEMM plans.
ShardSpec start_tp(const RunOptions& o, const fs::path& dir, const ModelConfig& cfg,
                   const fs::path& model_dir, EngineOptions& eo) {
  eo.tp_lm_head = o.tp_lm_head;
  eo.tp_all_reduce = o.tp_all_reduce;
  TpLaunch launch;
  launch.tp = o.tp;
  launch.record_dir = dir.string();
  launch.quiet = o.quiet;
  launch.gemm_plans = o.tp_gemm_plans;
  return start_tp_group(launch, cfg, model_dir, eo);
}

}  // namespace

RunOutcome run_experiment(const Experiment& e, const RunOptions& o) {
  const kernels::Backend backend = resolve_backend(e);
  const ModelChoice model = resolve_model(e, backend, o.quiet);
  const ModelConfig cfg = ModelConfig::load(model.dir);
  if (auto issues = experiment::check_against(e, model_facts(cfg, backend)); !issues.empty())
    throw experiment::ExperimentError(issues);
  const EngineLimits limits = limits_of(e, cfg);
  std::optional<Tokenizer> tok;
  if (fs::exists(model.dir / "tokenizer.json")) tok = Tokenizer::load(model.dir);
  experiment::VocabFacts vocab{cfg.vocab_size, cfg.bos_token_id,
                               cfg.vocab_size > 128000 ? 128000 : -1};
  Experiment bounded = e;
  bounded.resolved["limits"]["max_context"] = limits.max_context;
  const std::vector<experiment::WorkItem> workload =
      experiment::build_workload(bounded, encoder_of(tok), vocab);
  if (!o.workload_out.empty()) write_workload(o.workload_out, workload);
  RunOutcome out;
  if (o.dry_run) return out;

  const fs::path dir = o.out_dir.empty() ? default_run_dir(e.name()) : o.out_dir;
  harness::Session session(harness_options_of(e, dir, o.quiet));
  session.set_command(o.command);
  EngineOptions eo;
  eo.backend = backend;
  eo.limits = limits;
  for (auto& [family, v] : e.resolved["kernels"].items())
    eo.kernels.emplace_back(
        family, v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>()));
  eo.use_cuda_graphs = e.resolved["cuda_graphs"];
  session.apply(eo);
  const ShardSpec shard = start_tp(o, dir, cfg, model.dir, eo);
  Weights w = Weights::load(cfg, model.dir, backend, {}, eo.gpu, shard);
  if (!o.quiet)
    std::fprintf(stderr, "lantern: %s on %s with %s: %zu requests, %d warm-up + %d repetitions\n",
                 e.name().c_str(), kernels::backend_name(backend), model.dir.c_str(),
                 workload.size(), e.resolved["warmup"].get<int>(),
                 e.resolved["repetitions"].get<int>());
  Engine engine(cfg, std::move(w), eo);
  json resolved_engine = engine.describe();
  session.set_config(resolved_engine);
  session.add_manifest_section("experiment", experiment_section(e, model, backend));
  session.add_manifest_section("hashes", hashes_of(model.dir));
  if (!o.pins.empty()) session.add_manifest_section("rerun_of", o.pins);

  const harness::DriverClock clock = harness::engine_clock(engine);
  const int warmup = e.resolved["warmup"], reps = e.resolved["repetitions"];
  std::vector<json> rep_metrics;
  for (int i = 0; i < warmup + reps; ++i) {
    const bool measured = i >= warmup;
    ProgressLine line(measured ? strformat("%s rep %d/%d", e.name().c_str(), i - warmup + 1, reps)
                               : strformat("%s warm-up %d/%d", e.name().c_str(), i + 1, warmup),
                      total_tokens(workload), o.quiet);
    harness::DriveResult r = harness::drive(
        engine, workload, clock, [&](const harness::DriveProgress& p) { line.update(p); });
    if (!measured) continue;
    rep_metrics.push_back(repetition_metrics(r));
    for (size_t k = 0; k < r.results.size(); ++k) {
      RequestResult res = r.results[k];
      if (reps > 1) res.tag = strformat("rep%d/", i - warmup) + res.tag;
      std::string text = tok ? tok->decode(res.tokens, /*skip_special=*/true) : std::string();
      session.on_result(res, text, workload[k].prompt_text);
    }
    out.results = std::move(r.results);
  }
  out.summary = experiment::summarize_repetitions(rep_metrics);
  session.add_metrics_section("repetitions", rep_metrics);
  session.add_metrics_section("summary", out.summary);
  session.add_metrics_section("warmup", warmup);
  session.finish(engine);
  std::fflush(stderr);
  if (o.print_summary) print_metrics_line(out.summary);
  if (session.recording()) {
    out.dir = dir;
    if (o.print_summary) {
      std::printf("run directory: %s\n", dir.c_str());
      print_run_summary(dir);
    }
  }
  std::fflush(stdout);
  return out;
}

}  // namespace lantern::cli
