#include "harness/cli/harness_args.h"

#include <charconv>

#include "engine/common.h"

namespace lantern::cli {

const std::vector<std::string>& harness_value_options() {
  static const std::vector<std::string> options = {"--record", "--name", "--profile-steps",
                                                   "--harness"};
  return options;
}

const std::vector<std::string>& harness_flag_options() {
  static const std::vector<std::string> options = {"--no-nvtx", "--no-cupti",  "--no-alias",
                                                   "--no-kv",   "--no-memory", "--no-roofline"};
  return options;
}

void add_harness_options(std::vector<std::string>& value_options,
                         std::vector<std::string>& flag_options) {
  value_options.insert(value_options.end(), harness_value_options().begin(),
                       harness_value_options().end());
  flag_options.insert(flag_options.end(), harness_flag_options().begin(),
                      harness_flag_options().end());
}

namespace {

int parse_step(const std::string& text, const std::string& whole) {
  int v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  LANTERN_CHECK(ec == std::errc() && p == text.data() + text.size() && v >= 0,
                "--profile-steps expects A:B with 0 <= A <= B (engine step numbers), got '%s'",
                whole.c_str());
  return v;
}

}  // namespace

harness::HarnessOptions parse_harness_options(const Args& args) {
  harness::HarnessOptions o;
  if (auto dir = args.get("--record")) {
    LANTERN_CHECK(!dir->empty(), "--record needs a directory");
    o.record_dir = *dir;
  }
  o.name = args.get_or("--name", "");
  if (auto mode = args.get("--harness")) {
    LANTERN_CHECK(*mode == "on" || *mode == "off", "--harness expects on or off, got '%s'",
                  mode->c_str());
    o.enabled = *mode == "on";
  }
  if (auto range = args.get("--profile-steps")) {
    auto colon = range->find(':');
    LANTERN_CHECK(colon != std::string::npos,
                  "--profile-steps expects A:B (first and last engine step), got '%s'",
                  range->c_str());
    o.profile_first = parse_step(range->substr(0, colon), *range);
    o.profile_last = parse_step(range->substr(colon + 1), *range);
    LANTERN_CHECK(o.profile_first <= o.profile_last,
                  "--profile-steps %s: the first step is after the last", range->c_str());
  }
  o.nvtx = !args.flag("--no-nvtx");
  o.cupti = !args.flag("--no-cupti");
  o.alias = !args.flag("--no-alias");
  o.kv = !args.flag("--no-kv");
  o.memory = !args.flag("--no-memory");
  o.roofline = !args.flag("--no-roofline");
  return o;
}

std::string harness_options_help() {
  return "harness options:\n"
         "  --record DIR          write a run directory (manifest, metrics, trace, kernels,\n"
         "                        memory, kv, outputs) to DIR; see docs/run-format.md\n"
         "  --name NAME           run name recorded in the manifest (default: DIR's name)\n"
         "  --profile-steps A:B   wrap engine steps A..B in cudaProfilerStart/Stop, for\n"
         "                        nsys profile --capture-range=cudaProfilerApi\n"
         "  --harness on|off      off: attach no observer at all (default on)\n"
         "  --no-nvtx             no NVTX ranges\n"
         "  --no-cupti            no CUPTI kernel timings (use under nsys or ncu)\n"
         "  --no-alias            no alias-lifetime tracking\n"
         "  --no-kv               no KV block recording\n"
         "  --no-memory           no memory map\n"
         "  --no-roofline         skip the roofline probes of CUDA runs\n";
}

}  // namespace lantern::cli
