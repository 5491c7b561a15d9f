#pragma once
// Options shared by every command that builds an engine (generate, score, ...).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "harness/cli/command.h"

namespace lantern::cli {

// Options these helpers read; commands append their own.
std::vector<std::string> engine_value_options();
std::vector<std::string> engine_flag_options();

struct LoadedEngine {
  ModelConfig config;
  std::filesystem::path model_dir;
  std::unique_ptr<Engine> engine;
  WeightLoadStats load_stats;
};

// --device cpu|cuda (default: cuda when a GPU is usable, else cpu).
kernels::Backend backend_from_args(const Args& args);
// --gpu N (default 0): the CUDA device index; checked against the GPUs present
// when the engine selects it (Device::select_gpu).
int gpu_from_args(const Args& args);
// Limits from --limits FILE.json then the individual --max-* options.
EngineLimits limits_from_args(const Args& args);
// Loads config + weights and builds the engine; prints the load line and the
// memory budget to stderr unless --quiet.
// `customize` (may be empty) edits the options last, e.g. harness::Session::apply.
LoadedEngine build_engine(const Args& args, Observer* observer = nullptr,
                          const EngineLimits* override_limits = nullptr,
                          const std::function<void(EngineOptions&)>& customize = {});

// --tp-allreduce auto|nccl|p2p (an error without --tp, `tp` == 0), else
// LANTERN_TP_ALLREDUCE (read only with --tp), else auto; a bad value is a
// one-line error naming the valid ones.
TpAllReduce tp_all_reduce_from(const std::optional<std::string>& value, int tp);

// --gemm-plans FILE (bench, generate): pins gemm.6's start-up plans to the ones FILE records (a
// `lantern bench --json` file, a run directory or its manifest.json); a one-line error otherwise.
void pin_gemm_plans_from(const std::string& path);

std::vector<int32_t> parse_ids(const std::string& text);  // "1,2 3\n4" -> {1,2,3,4}

}  // namespace lantern::cli
