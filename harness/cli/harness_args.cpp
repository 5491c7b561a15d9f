#include "harness/cli/harness_args.h"

namespace lantern::cli {

const std::vector<std::string>& harness_value_options() {
  static const std::vector<std::string> options = {"--record", "--name", "--profile-steps",
                                                   "--harness", "--cupti-every",
                                                   "--cupti-window", "--cupti-budget"};
  return options;
}

const std::vector<std::string>& harness_flag_options() {
  static const std::vector<std::string> options = {"--no-nvtx", "--no-cupti",  "--no-alias",
                                                   "--no-kv",   "--no-memory", "--no-roofline",
                                                   "--cupti-all-steps"};
  return options;
}

void add_harness_options(std::vector<std::string>& value_options,
                         std::vector<std::string>& flag_options) {
  value_options.insert(value_options.end(), harness_value_options().begin(),
                       harness_value_options().end());
  flag_options.insert(flag_options.end(), harness_flag_options().begin(),
                      harness_flag_options().end());
}

harness::HarnessOptions parse_harness_options(const Args& args) {
  std::map<std::string, std::string> values;
  for (const std::string& key : harness_value_options())
    if (auto v = args.get(key)) values[key] = *v;
  std::set<std::string> flags;
  for (const std::string& key : harness_flag_options())
    if (args.flag(key)) flags.insert(key);
  return harness::harness_options_from(values, flags);
}

}  // namespace lantern::cli
