#pragma once
// Runs one resolved experiment: resolves the model (synthesising a preset
// into its cache folder on first use), checks the experiment against the
// model and the kernel registry, builds the workload, loads the engine under
// a harness Session, runs the warm-ups and the repetitions through the
// serving driver and writes one run directory (docs/experiments.md).
// `lantern run`, `lantern rerun` and `lantern sweep` all come through here.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "harness/experiment/experiment.h"

namespace lantern::cli {

struct RunOptions {
  std::filesystem::path out_dir;       // empty: runs/<UTC time>-<name>
  std::vector<std::string> command;    // recorded in the manifest
  bool quiet = false;                  // no progress, no load lines
  bool print_summary = true;           // run dir, top kernels, alias/KV, next commands
  std::filesystem::path workload_out;  // write the expanded workload (.jsonl) here
  bool dry_run = false;                // validate, build the workload, stop before loading weights
  int tp = 0;                          // --tp N: tensor parallelism over N processes (0: off)
  TpLmHead tp_lm_head = TpLmHead::replicated;  // --tp-lm-head
  TpAllReduce tp_all_reduce = TpAllReduce::automatic;  // --tp-allreduce (else LANTERN_TP_ALLREDUCE)
  // `lantern rerun`: each rank's recorded GEMM plans (TpLaunch::gemm_plans).
  std::vector<nlohmann::json> tp_gemm_plans;
  nlohmann::json pins = nlohmann::json::object();  // recorded effective settings (rerun)
};

struct RunOutcome {
  std::filesystem::path dir;           // empty when nothing was recorded
  nlohmann::json summary;              // summarize_repetitions of the serving metrics
  std::vector<RequestResult> results;  // last repetition, workload order
};

std::filesystem::path default_run_dir(const std::string& name, const std::string& suffix = "");
RunOutcome run_experiment(const experiment::Experiment& e, const RunOptions& options);

// "--set" values of a command line, parsed and path-checked.
std::vector<experiment::Override> overrides_from(const std::vector<std::string>& sets);

}  // namespace lantern::cli

namespace lantern::cli {

// The grid of `params` (command line) plus the file's own "sweep" section,
// every point validated before any runs; one run directory per point under
// `sweep_dir` (default runs/<time>-<name>-sweep) and sweep.csv. Returns 0.
int run_sweep(const std::filesystem::path& file, const std::vector<std::string>& params,
              const std::vector<std::string>& sets, std::filesystem::path sweep_dir, bool quiet,
              const std::vector<std::string>& command);

}  // namespace lantern::cli
