#pragma once
// Aggregations over kernels.csv rows shared by `lantern inspect` and the
// viewer: time per op / per kernel with achieved rates and roofline share.
#include <optional>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

struct TimeSummary {
  std::string key;            // op name, or kernel name
  std::string family, variant_name;
  int64_t rows = 0;           // kernels (cupti) or op calls (host)
  double total_us = 0, mean_us = 0;
  double share = 0;           // of the total time of the rows summarised
  double bytes = 0, flops = 0;
  std::optional<double> gb_per_s, tflop_per_s, pct_roofline;
  // The launch configuration that took most of the group's time and its
  // occupancy (unknown on host rows), and how many distinct configurations
  // the group's kernels had (decode and prefill often differ).
  LaunchConfig launch_config;
  std::optional<Occupancy> occupancy;
  int launch_configs = 0;
};

enum class GroupBy { op, kernel };

// Rows grouped by op (with its family/variant) or by kernel name, sorted by
// total time, largest first. `phase` filters ("" = all phases).
std::vector<TimeSummary> summarize(const std::vector<KernelRow>& rows, GroupBy by,
                                   const std::string& phase = "");

}  // namespace lantern::runfmt
