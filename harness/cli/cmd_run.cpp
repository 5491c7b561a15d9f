// `lantern run EXP.json` and `lantern rerun RUN_DIR`: an experiment file (or
// a recorded manifest) through the experiment runner (experiment_runner.h).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "engine/engine.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"
#include "harness/cli/experiment_runner.h"
#include "harness/experiment/sweep.h"
#include "harness/manifest.h"
#include "kernels/base/errors.h"
#include "kernels/gemm_plan.h"

namespace lantern::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

int cmd_run(const std::vector<std::string>& argv) {
  Args args(argv,
            {"--set", "--out", "--workload-out", "--resolved-out", "--tp", "--tp-lm-head",
             "--tp-allreduce"},
            {"--dry-run", "--quiet"});
  LANTERN_CHECK(args.positional().size() == 1,
                "expected one experiment file (fix: lantern run EXP.json; "
                "lantern run --help)");
  const fs::path file = args.positional()[0];
  const json doc = experiment::load_json_file(file);
  const auto sets = overrides_from(args.get_all("--set"));
  experiment::Experiment e = experiment::resolve(doc, file.string(), sets);
  if (auto path = args.get("--resolved-out"))  // what the peers read (experiments/peers/)
    experiment::save_experiment_file(*path, e.resolved);
  if (!e.resolved["sweep"].empty() && !args.flag("--dry-run"))
    return run_sweep(file, {}, args.get_all("--set"), args.get_or("--out", ""),
                     args.flag("--quiet"), argv);
  RunOptions o;
  o.out_dir = args.get_or("--out", "");
  o.command = argv;
  o.command.insert(o.command.begin(), "run");
  o.quiet = args.flag("--quiet");
  o.dry_run = args.flag("--dry-run");
  o.workload_out = args.get_or("--workload-out", "");
  o.tp = static_cast<int>(args.get_int("--tp", 0, 1, 1024));
  o.tp_lm_head = parse_tp_lm_head(args.get_or("--tp-lm-head", "replicated"));
  o.tp_all_reduce = tp_all_reduce_from(args.get("--tp-allreduce"), o.tp);
  LANTERN_CHECK(o.tp == 0 || e.resolved["sweep"].empty(), "--tp is not supported with sweeps yet: run "
                "each point with lantern run --tp N --set ...");
  run_experiment(e, o);
  if (o.dry_run) std::printf("%s: valid (%s)\n", file.c_str(), e.name().c_str());
  return 0;
}

std::vector<std::vector<int32_t>> recorded_tokens(const fs::path& dir) {
  std::ifstream in(dir / "outputs.jsonl");
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line).at("tokens").get<std::vector<int32_t>>());
  return out;
}

std::string field(const json& m, const char* a, const char* b) {
  if (!m.contains(a) || !m[a].is_object() || !m[a].contains(b)) return "";
  const json& v = m[a][b];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void report_provenance(const json& old_m, const json& new_m) {
  auto line = [](const char* what, const std::string& a, const std::string& b) {
    std::printf("rerun: %-9s %s%s\n", what, a == b ? "same " : "DIFFERS: ",
                a == b ? a.c_str() : (a + " (recorded) vs " + b + " (now)").c_str());
  };
  line("weights", field(old_m, "hashes", "weights"), field(new_m, "hashes", "weights"));
  line("tokenizer", field(old_m, "hashes", "tokenizer"), field(new_m, "hashes", "tokenizer"));
  line("commit",
       field(old_m, "git", "commit") + (field(old_m, "git", "dirty") == "true" ? " dirty" : ""),
       field(new_m, "git", "commit") + (field(new_m, "git", "dirty") == "true" ? " dirty" : ""));
}

// The recorded experiment with the device and the synthetic preset pinned
// to what the run actually used, unless a --set changes them.
json pinned_document(const json& section, const std::vector<experiment::Override>& sets) {
  json doc = section.at("resolved");
  const json& eff = section.at("effective");
  auto set_by_user = [&](const std::string& prefix) {
    for (const auto& o : sets)
      if (o.path.rfind(prefix, 0) == 0) return true;
    return false;
  };
  if (!set_by_user("device")) doc["device"] = eff.at("device");
  if (!set_by_user("model") && doc["model"]["path"].is_null() &&
      !eff.at("preset").get<std::string>().empty())
    doc["model"]["preset"] = eff.at("preset");
  return doc;
}

// The manifest's config.tensor_parallel (null when it ran on one process).
json recorded_tp_section(const json& manifest) {
  if (!manifest.contains("config") || !manifest["config"].is_object()) return nullptr;
  const json& c = manifest["config"];
  if (!c.contains("tensor_parallel") || !c["tensor_parallel"].is_object()) return nullptr;
  return c["tensor_parallel"];
}

// The tensor-parallel world a run was recorded with (0 when one process).
int recorded_tp(const json& manifest) {
  const json tp = recorded_tp_section(manifest);
  return tp.is_object() ? tp.value("world", 0) : 0;
}

// Rank r's recorded GEMM plans (gemm.6): config.gemm_plans of RUN/manifest.json
// (rank 0) and of RUN/rank-r/manifest.json; a rank without its own manifest
// takes rank 0's (every rank runs the same per-rank shapes), so it pins
// rather than re-times. {"source": manifest, "plans": [...]} per rank.
std::vector<json> recorded_gemm_plans(const fs::path& run_dir, const json& manifest, int world) {
  std::vector<json> ranks = {
      {{"source", (run_dir / "manifest.json").string()}, {"plans", recorded_gemm_plans_json(manifest)}}};
  for (int r = 1; r < world; ++r) {
    const fs::path own = run_dir / ("rank-" + std::to_string(r)) / "manifest.json";
    ranks.push_back(fs::exists(own) ? json{{"source", own.string()},
                                           {"plans", recorded_gemm_plans_json(experiment::load_json_file(own))}}
                                    : ranks[0]);
  }
  return ranks;
}

// What rerun repeats of the recorded run's tensor parallelism (each unless
// its option says otherwise): the world (config.tensor_parallel.world), the
// LM-head layout (.lm_head), the all_reduce choice (.all_reduce_path; else
// LANTERN_TP_ALLREDUCE, else auto), and every rank's GEMM plans: rank 0
// pins its own here, the others receive theirs with the setup.
void repeat_tensor_parallel(const Args& args, const fs::path& run_dir, const json& old_m,
                            RunOptions& o) {
  o.tp = static_cast<int>(args.get_int("--tp", recorded_tp(old_m), 1, 1024));
  const json tp = recorded_tp_section(old_m);
  const std::vector<json> plans = recorded_gemm_plans(run_dir, old_m, std::max(o.tp, 1));
  std::vector<kernels::GemmPlan> pins = gemm_plans_from_json(plans[0]["plans"]);
  if (!pins.empty() && !o.quiet)
    std::fprintf(stderr, "lantern: pins %zu GEMM plan%s recorded in %s\n", pins.size(),
                 pins.size() == 1 ? "" : "s", plans[0]["source"].get<std::string>().c_str());
  kernels::pin_gemm_plans(std::move(pins));
  const std::optional<std::string> path = args.get("--tp-allreduce");
  const bool recorded_path = tp.is_object() && tp.contains("all_reduce_path");
  o.tp_all_reduce = path || !recorded_path
                        ? tp_all_reduce_from(path, o.tp)
                        : parse_tp_all_reduce(tp["all_reduce_path"].get<std::string>());
  if (o.tp == 0) return;
  o.tp_gemm_plans = plans;
  o.tp_lm_head = parse_tp_lm_head(
      args.get_or("--tp-lm-head", tp.is_object() ? tp.value("lm_head", "replicated") : "replicated"));
}

int cmd_rerun(const std::vector<std::string>& argv) {
  Args args(argv, {"--set", "--out", "--tp", "--tp-lm-head", "--tp-allreduce"},
            {"--check", "--quiet"});
  LANTERN_CHECK(args.positional().size() == 1,
                "expected one run directory (fix: lantern rerun RUN_DIR)");
  const fs::path run_dir = args.positional()[0];
  const json old_m = experiment::load_json_file(run_dir / "manifest.json");
  LANTERN_CHECK(old_m.contains("experiment") && old_m["experiment"].contains("resolved"),
                "%s was not recorded by `lantern run` (no experiment in its manifest) (fix: rerun "
                "it with the "
                "command in its manifest)",
                run_dir.c_str());
  const json& section = old_m["experiment"];
  // The recorded LANTERN_* knobs, set before anything in this process reads them.
  if (old_m.contains("environment")) {
    const std::vector<std::string> notes = harness::apply_recorded_environment(old_m["environment"]);
    for (const std::string& n : notes) std::printf("rerun: env       %s\n", n.c_str());
    if (notes.empty()) std::printf("rerun: env       same (%zu LANTERN_* variables)\n", old_m["environment"].size());
  } else {
    std::printf("rerun: env       not recorded (a run from before session 12): this process's LANTERN_* variables\n");
  }
  const auto sets = overrides_from(args.get_all("--set"));
  experiment::Experiment e =
      experiment::resolve(pinned_document(section, sets), (run_dir / "manifest.json").string(),
                          sets, fs::path(section.value("base_dir", std::string())));
  RunOptions o;
  o.out_dir = args.get_or("--out", "");
  if (o.out_dir.empty()) o.out_dir = default_run_dir(e.name(), "-rerun");
  o.command = argv;
  o.command.insert(o.command.begin(), "rerun");
  o.quiet = args.flag("--quiet");
  o.pins = {{"run", run_dir.string()}, {"created_utc", old_m.value("created_utc", "")}};
  repeat_tensor_parallel(args, run_dir, old_m, o);
  RunOutcome out = run_experiment(e, o);

  json new_m = out.dir.empty() ? json{{"git", harness::git_info()}}
                               : experiment::load_json_file(out.dir / "manifest.json");
  report_provenance(old_m, new_m);
  std::vector<std::vector<int32_t>> before = recorded_tokens(run_dir);
  size_t n = out.results.size(), differ = 0;
  LANTERN_CHECK(before.size() >= n,
                "%s/outputs.jsonl holds %zu requests, the rerun %zu (fix: rerun with the "
                "recorded workload)",
                run_dir.c_str(), before.size(), n);
  for (size_t i = 0; i < n; ++i) differ += before[before.size() - n + i] != out.results[i].tokens;
  if (differ == 0)
    std::printf("rerun: tokens    identical for all %zu requests\n", n);
  else
    std::printf("rerun: tokens    DIFFER in %zu of %zu requests\n", differ, n);
  return args.flag("--check") && differ ? 1 : 0;
}

}  // namespace

LANTERN_COMMAND("run", "run an experiment file (docs/experiments.md) into a run directory",
                cmd_run);
LANTERN_COMMAND("rerun", "rerun a recorded run from its manifest; say what differs", cmd_rerun);

}  // namespace lantern::cli
