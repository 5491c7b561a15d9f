#include "harness/harness_options.h"

#include <charconv>
#include <string_view>

#include "kernels/base/errors.h"

namespace lantern::harness {

namespace {

// True when all of `text` is one number.
template <class T>
bool parse_whole(std::string_view text, T& v) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return !text.empty() && ec == std::errc() && p == text.data() + text.size();
}

int parse_step(const std::string& text, const std::string& whole) {
  int v = -1;
  LANTERN_CHECK(parse_whole(text, v) && v >= 0,
                "--profile-steps expects A:B with 0 <= A <= B (engine step numbers), got '%s'",
                whole.c_str());
  return v;
}

}  // namespace

std::pair<int, int> parse_profile_steps(const std::string& text) {
  auto colon = text.find(':');
  LANTERN_CHECK(colon != std::string::npos,
                "--profile-steps expects A:B (first and last engine step), got '%s'", text.c_str());
  int first = parse_step(text.substr(0, colon), text);
  int last = parse_step(text.substr(colon + 1), text);
  LANTERN_CHECK(first <= last, "--profile-steps %s: the first step is after the last",
                text.c_str());
  return {first, last};
}

HarnessOptions harness_options_from(const std::map<std::string, std::string>& values,
                                    const std::set<std::string>& flags) {
  HarnessOptions o;
  auto value = [&](const char* key) -> const std::string* {
    auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  };
  if (const std::string* dir = value("--record")) {
    LANTERN_CHECK(!dir->empty(), "--record needs a directory");
    o.record_dir = *dir;
  }
  if (const std::string* name = value("--name")) o.name = *name;
  if (const std::string* mode = value("--harness")) {
    LANTERN_CHECK(*mode == "on" || *mode == "off", "--harness expects on or off, got '%s'",
                  mode->c_str());
    o.enabled = *mode == "on";
  }
  if (const std::string* range = value("--profile-steps"))
    std::tie(o.profile_first, o.profile_last) = parse_profile_steps(*range);
  if (const std::string* every = value("--cupti-every")) {
    int v = 0;
    LANTERN_CHECK(parse_whole(*every, v) && v >= 1,
                  "--cupti-every expects a positive step count N (kernel records on every Nth "
                  "step), got '%s'",
                  every->c_str());
    o.cupti_config.kernel_every = v;
  }
  if (const std::string* window = value("--cupti-window")) {
    const std::string_view text(*window);
    const auto colon = text.find(':');
    int w = 0, p = 0;
    const bool ok = colon != std::string_view::npos && parse_whole(text.substr(0, colon), w) &&
                    parse_whole(text.substr(colon + 1), p) && w >= 1 && w <= p;
    LANTERN_CHECK(ok, "--cupti-window expects W:P with 1 <= W <= P (CUPTI attached for W steps of "
                      "every P), got '%s'",
                  window->c_str());
    o.cupti_config.window_steps = w;
    o.cupti_config.window_period = p;
  }
  if (const std::string* budget = value("--cupti-budget")) {
    double pct = 0;
    LANTERN_CHECK(parse_whole(*budget, pct) && pct > 0 && pct < 100,
                  "--cupti-budget expects a share of wall time in percent, 0 < PCT < 100 (e.g. "
                  "1.5), got '%s'; --cupti-all-steps traces every step",
                  budget->c_str());
    o.cupti_config.window_budget = pct / 100;
  }
  const bool all_steps = flags.count("--cupti-all-steps") != 0;
  if (all_steps) o.cupti_config.window_budget = 0;
  const int schedules = (values.count("--cupti-every") != 0) + (values.count("--cupti-window") != 0) +
                        (values.count("--cupti-budget") != 0) + all_steps;
  LANTERN_CHECK(schedules <= 1,
                "--cupti-every, --cupti-window, --cupti-budget and --cupti-all-steps exclude each "
                "other: use one");
  o.nvtx = !flags.count("--no-nvtx");
  o.cupti = !flags.count("--no-cupti");
  o.alias = !flags.count("--no-alias");
  o.kv = !flags.count("--no-kv");
  o.memory = !flags.count("--no-memory");
  o.roofline = !flags.count("--no-roofline");
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
         "  --cupti-budget PCT    CUPTI attached for 8-step windows, detached in between;\n"
         "                        a window opens when attaching and detaching so far\n"
         "                        fit in PCT % of wall time (default 1.5)\n"
         "  --cupti-all-steps     CUPTI attached for the whole run: every kernel of every\n"
         "                        step (batch-1 decode ~20 % slower on an H200)\n"
         "  --cupti-every N       CUPTI attached for the whole run, kernel records on\n"
         "                        prefill/mixed steps and every Nth decode step\n"
         "  --cupti-window W:P    CUPTI attached for W steps of every P, detached in\n"
         "                        between\n"
         "  --no-alias            no alias-lifetime tracking\n"
         "  --no-kv               no KV block recording\n"
         "  --no-memory           no memory map\n"
         "  --no-roofline         skip the roofline probes of CUDA runs\n";
}

}  // namespace lantern::harness
