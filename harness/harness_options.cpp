#include "harness/harness_options.h"

#include <charconv>

#include "engine/common.h"

namespace lantern::harness {

namespace {

int parse_step(const std::string& text, const std::string& whole) {
  int v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  LANTERN_CHECK(!text.empty() && ec == std::errc() && p == text.data() + text.size() && v >= 0,
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
    auto [p, ec] = std::from_chars(every->data(), every->data() + every->size(), v);
    LANTERN_CHECK(!every->empty() && ec == std::errc() && p == every->data() + every->size() && v >= 1,
                  "--cupti-every expects a positive step count N (kernel records on every Nth "
                  "step), got '%s'",
                  every->c_str());
    o.cupti_config.kernel_every = v;
  }
  if (const std::string* window = value("--cupti-window")) {
    auto colon = window->find(':');
    int w = 0, p = 0;
    bool ok = colon != std::string::npos;
    if (ok) {
      auto [e1, c1] = std::from_chars(window->data(), window->data() + colon, w);
      auto [e2, c2] = std::from_chars(window->data() + colon + 1, window->data() + window->size(), p);
      ok = c1 == std::errc() && e1 == window->data() + colon && c2 == std::errc() &&
           e2 == window->data() + window->size() && w >= 1 && w <= p;
    }
    LANTERN_CHECK(ok, "--cupti-window expects W:P with 1 <= W <= P (CUPTI attached for W steps of "
                      "every P), got '%s'",
                  window->c_str());
    o.cupti_config.window_steps = w;
    o.cupti_config.window_period = p;
  }
  LANTERN_CHECK(o.cupti_config.window_period == 0 || o.cupti_config.kernel_every == 1,
                "--cupti-window and --cupti-every exclude each other: use one");
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
         "  --cupti-every N       CUPTI kernel records on prefill/mixed steps and every\n"
         "                        Nth decode step only (default 1: every step)\n"
         "  --cupti-window W:P    CUPTI attached only for W steps of every P (and graph\n"
         "                        captures); detached in between (experimental)\n"
         "  --no-alias            no alias-lifetime tracking\n"
         "  --no-kv               no KV block recording\n"
         "  --no-memory           no memory map\n"
         "  --no-roofline         skip the roofline probes of CUDA runs\n";
}

}  // namespace lantern::harness
