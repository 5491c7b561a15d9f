#include "harness/cli/engine_args.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/device.h"
#include "kernels/base/json_parse.h"
#include "engine/tensor_parallel.h"
#include "harness/cli/harness_args.h"
#include "harness/experiment/experiment.h"
#include "kernels/gemm_plan.h"
#include "harness/cli/tp_launch.h"

namespace lantern::cli {

std::vector<std::string> engine_value_options() {
  return {"--model",         "--device",       "--gpu",         "--limits",
          "--max-batch-tokens", "--max-seqs",   "--max-context", "--kv-block-size",
          "--kv-blocks",     "--kv-fraction",  "--kernels",     "--tp",
          "--tp-lm-head",    "--tp-allreduce"};
}
std::vector<std::string> engine_flag_options() { return {"--quiet", "--no-cuda-graphs"}; }

kernels::Backend backend_from_args(const Args& args) {
  auto d = args.get("--device");
  if (!d) return Device::cuda_available() ? kernels::Backend::cuda : kernels::Backend::cpu;
  if (*d == "cpu") return kernels::Backend::cpu;
  if (*d == "cuda") return kernels::Backend::cuda;
  LANTERN_FAIL("unknown --device '%s': use cpu or cuda", d->c_str());
}

int gpu_from_args(const Args& args) {
  const int64_t gpu = args.get_int("--gpu", 0);
  LANTERN_CHECK(gpu >= 0 && gpu <= INT32_MAX, "--gpu %lld: a GPU index is 0 or more",
                static_cast<long long>(gpu));
  return static_cast<int>(gpu);
}

EngineLimits limits_from_args(const Args& args) {
  EngineLimits l;
  if (auto f = args.get("--limits")) {
    l = EngineLimits::from_json(parse_json_file(*f, "limits file " + *f));
  }
  l.max_batch_tokens = static_cast<int>(args.get_int("--max-batch-tokens", l.max_batch_tokens));
  l.max_seqs = static_cast<int>(args.get_int("--max-seqs", l.max_seqs));
  l.max_context = static_cast<int>(args.get_int("--max-context", l.max_context));
  l.kv_block_size = static_cast<int>(args.get_int("--kv-block-size", l.kv_block_size));
  l.kv_num_blocks = static_cast<int>(args.get_int("--kv-blocks", l.kv_num_blocks));
  l.kv_memory_fraction = args.get_double("--kv-fraction", l.kv_memory_fraction, 1e-6, 1.0);
  return l;
}

TpAllReduce tp_all_reduce_from(const std::optional<std::string>& value, int tp) {
  if (!value) return tp > 0 ? tp_all_reduce_from_env() : TpAllReduce::automatic;  // env unused off TP
  LANTERN_CHECK(tp > 0, "--tp-allreduce %s needs tensor parallelism: add --tp N", value->c_str());
  return parse_tp_all_reduce(*value);
}

namespace {

// --tp N and what its followers need: rank 0's run directory and harness
// options (they record with the same CUPTI schedule and switches).
TpLaunch tp_launch_from_args(const Args& args) {
  TpLaunch launch;
  launch.tp = static_cast<int>(args.get_int("--tp", 0, 1, 1024));
  launch.record_dir = args.get_or("--record", "");
  launch.quiet = args.flag("--quiet");
  launch.harness_args = {{"values", nlohmann::json::object()}, {"flags", nlohmann::json::array()}};
  for (const std::string& key : harness_value_options())
    if (auto v = args.get(key)) launch.harness_args["values"][key] = *v;
  for (const std::string& key : harness_flag_options())
    if (args.flag(key)) launch.harness_args["flags"].push_back(key);
  return launch;
}

}  // namespace

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    char* end = nullptr;
    long v = std::strtol(tok.c_str(), &end, 10);
    LANTERN_CHECK(end && *end == '\0', "token id '%s' is not an integer", tok.c_str());
    LANTERN_CHECK(v >= 0 && v <= INT32_MAX, "token id %ld is out of range", v);
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') flush();
    else tok += c;
  }
  flush();
  return ids;
}

LoadedEngine build_engine(const Args& args, Observer* observer, const EngineLimits* override_limits,
                          const std::function<void(EngineOptions&)>& customize) {
  LoadedEngine le;
  le.model_dir = args.require("--model");
  le.config = ModelConfig::load(le.model_dir);
  EngineOptions opt;
  opt.backend = backend_from_args(args);
  opt.gpu = gpu_from_args(args);
  opt.limits = override_limits ? *override_limits : limits_from_args(args);
  if (opt.limits.max_context > le.config.max_position_embeddings && le.config.max_position_embeddings > 0 &&
      !args.get("--max-context") && !args.get("--limits"))
    opt.limits.max_context = le.config.max_position_embeddings;
  opt.observer = observer;
  opt.use_cuda_graphs = !args.flag("--no-cuda-graphs");
  if (auto k = args.get("--kernels")) {
    std::stringstream ss(*k);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto eq = item.find('=');
      LANTERN_CHECK(eq != std::string::npos, "--kernels entry '%s' must look like family=variant",
                    item.c_str());
      opt.kernels.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  const TpLaunch launch = tp_launch_from_args(args);
  opt.tp_lm_head = parse_tp_lm_head(args.get_or("--tp-lm-head", "replicated"));
  opt.tp_all_reduce = tp_all_reduce_from(args.get("--tp-allreduce"), launch.tp);
  if (customize) customize(opt);
  bool quiet = args.flag("--quiet");
  auto progress = [quiet](size_t done, size_t total) {
    if (quiet || total < (1ull << 30)) return;
    std::fprintf(stderr, "\rloading weights: %5.1f%% (%.2f / %.2f GB)", 100.0 * done / total, done / 1e9,
                 total / 1e9);
    if (done == total) std::fprintf(stderr, "\n");
  };
  const ShardSpec shard = start_tp_group(launch, le.config, le.model_dir, opt);
  Weights w = Weights::load(le.config, le.model_dir, opt.backend, progress, opt.gpu, shard);
  le.load_stats = w.stats();
  if (!quiet)
    std::fprintf(stderr, "lantern: loaded %.3f GB of weights on %s in %.3f s (%.2f GB/s)\n",
                 w.stats().bytes / 1e9, kernels::backend_name(opt.backend), w.stats().total_seconds,
                 w.stats().gb_per_s());
  le.engine = std::make_unique<Engine>(le.config, std::move(w), opt);
  for (const kernels::KernelEntry* e : le.engine->kernel_set().untested())  // even with --quiet
    std::fprintf(stderr,
                 "lantern: warning: %s.%d (%s) has not yet run on a GPU: its outputs are unverified (the run "
                 "records it as untested)\n",
                 kernels::family_name(e->family), e->variant, e->name);
  if (!quiet)
    std::fprintf(stderr, "lantern: memory budget (%s)\n%s", kernels::backend_name(opt.backend),
                 le.engine->memory_budget().table().c_str());
  return le;
}

// --gemm-plans FILE: pins gemm.6's start-up plans to the ones FILE records
// (the gemm_plans of a `lantern bench --json` file, or config.gemm_plans of a
// run directory's manifest.json), so two processes (bench, generate) run the same
// cuBLASLt algorithms: each process otherwise re-times its plans, and
// near-ties picked differently move a 512-token prefill by up to ~0.1 ms,
// as much as the kernel changes an A/B is after (docs/performance.md).
void pin_gemm_plans_from(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  if (fs::is_directory(file)) file /= "manifest.json";
  const nlohmann::json doc = experiment::load_json_file(file);
  const nlohmann::json list = recorded_gemm_plans_json(doc);
  LANTERN_CHECK(list.is_array(),
                "--gemm-plans %s: no gemm_plans array (give a file written by lantern bench --json on CUDA, a "
                "run directory or its manifest.json)",
                file.string().c_str());
  std::vector<kernels::GemmPlan> pins;
  try {
    pins = gemm_plans_from_json(list);
  } catch (const nlohmann::json::exception& e) {
    LANTERN_FAIL("--gemm-plans %s: a malformed plan (%s); write the file with lantern bench --json",
                 file.string().c_str(), e.what());
  }
  std::fprintf(stderr, "lantern: pins %zu GEMM plan%s from %s\n", pins.size(), pins.size() == 1 ? "" : "s",
               file.string().c_str());
  kernels::pin_gemm_plans(std::move(pins));
}

}  // namespace lantern::cli
