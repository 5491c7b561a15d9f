#pragma once
// Parsing of the harness's command-line options, apart from the CLI's Args
// class so the library (and its tests) own the rules; harness/cli/
// harness_args.h wires them into `lantern` commands.
#include <map>
#include <set>
#include <string>
#include <utility>

#include "harness/session.h"

namespace lantern::harness {

// "A:B" -> {A, B} with 0 <= A <= B; throws lantern::Error naming --profile-steps.
std::pair<int, int> parse_profile_steps(const std::string& text);

// Options from parsed "--key value" pairs and "--flag"s (keys include the
// dashes): --record DIR, --name NAME, --profile-steps A:B, --harness on|off,
// the CUPTI schedule (at most one of --cupti-budget PCT, --cupti-all-steps,
// --cupti-every N, --cupti-window W:P; default: budget windows), and the
// switches --no-nvtx, --no-cupti, --no-alias, --no-kv, --no-memory,
// --no-roofline. Throws lantern::Error naming the option on a bad value.
HarnessOptions harness_options_from(const std::map<std::string, std::string>& values,
                                    const std::set<std::string>& flags);

// Usage lines for a command's help text.
std::string harness_options_help();

}  // namespace lantern::harness
