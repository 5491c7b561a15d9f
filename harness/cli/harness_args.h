#pragma once
// The harness's command-line options, shared by every command that runs the
// engine (`lantern generate`, `lantern score`, `lantern run`):
//
//   --record DIR          write a run directory to DIR
//   --name NAME           run name in the manifest (default: DIR's last component)
//   --profile-steps A:B   cudaProfilerStart before step A, Stop after step B (nsys)
//   --harness on|off      off: attach no observer at all
//   --cupti-budget PCT / --cupti-all-steps / --cupti-every N / --cupti-window W:P
//                         when CUPTI traces (default: windows within 1.5 % of wall time)
//   --no-nvtx --no-cupti --no-alias --no-kv --no-memory --no-roofline
//
// A command appends them to its own option lists with add_harness_options()
// and builds a Session from parse_harness_options(args). The rules live in
// harness/harness_options.h (tested there).
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/harness_options.h"
#include "harness/session.h"

namespace lantern::cli {

const std::vector<std::string>& harness_value_options();
const std::vector<std::string>& harness_flag_options();
void add_harness_options(std::vector<std::string>& value_options,
                         std::vector<std::string>& flag_options);
// Throws lantern::Error naming the option on a bad value.
harness::HarnessOptions parse_harness_options(const Args& args);

}  // namespace lantern::cli
