#pragma once
// Aggregations over kernels.csv rows shared by `lantern inspect` and the
// viewer: time per op / per kernel with achieved rates and roofline share.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

struct TimeSummary {
  std::string key;            // op name, or kernel name
  std::string family, variant_name;
  int64_t rows = 0;           // kernels (cupti) or op calls (host)
  double total_us = 0, mean_us = 0;
  double share = 0;           // of the total time of the rows summarised
  // The group's time on its steps' busy path (path_shares: each row's end past
  // the latest end before it in its step on its device) and its share of the
  // summed path time. With programmatic dependent launch a kernel starts while
  // its predecessor drains, so durations overlap and total_us overstates what
  // removing the group's work would save; wall_us does not.
  double wall_us = 0, wall_share = 0;
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

// One step's rows on one device (any order; sorted in place by start): each
// row's busy share -- its end minus the later of its start and the latest end
// before it (0 when it ends inside an earlier row) -- and the idle gap before
// it (its start past the latest end before it; 0 for the first). Shares plus
// gaps add up to the span from the first start to the last end; shares alone
// to the busy time.
struct PathShare {
  const KernelRow* row;
  double busy_us, gap_before_us;
};
std::vector<PathShare> path_shares(std::vector<const KernelRow*>& rows);

// The same rule on bare intervals (the viewer's columnar index): `order`
// holds indices into start_us / dur_us and is stable-sorted by start in place;
// busy[i] and gap[i] receive each interval's share and the idle gap before it
// for the i in `order` (the vectors are grown to start_us's size when smaller;
// other entries are left as they were, so one pair serves many timelines).
void interval_shares(const std::vector<double>& start_us, const std::vector<double>& dur_us,
                     std::vector<size_t>& order, std::vector<double>& busy, std::vector<double>& gap);

// Those idle gaps grouped by the ops around them: `before` is the op of the
// kernel whose end the gap follows (the latest end so far), `after` the op of
// the kernel that ends it. Sorted by total time, largest first. What a gap
// means: the GPU waited -- for the host (eager launches), for a graph launch,
// or between a graph's nodes.
struct GapSummary {
  std::string before, after;
  int64_t count = 0;
  double total_us = 0, max_us = 0;
};
std::vector<GapSummary> idle_gaps(const std::vector<KernelRow>& rows, const std::string& phase = "");
// Their sum: the idle time inside steps (path_shares' gaps over every (device, step >= 0)).
double idle_in_steps_us(const std::vector<GapSummary>& gaps);

// Rows grouped by op (with its family/variant) or by kernel name, sorted by
// total time, largest first. `phase` filters ("" = all phases).
std::vector<TimeSummary> summarize(const std::vector<KernelRow>& rows, GroupBy by,
                                   const std::string& phase = "");

// The GPU's clocks over a recorded run (manifest.json gpu.clocks, written by
// harness/gpu_clocks.h), as one line every reader prints the same way
// (inspect's header, compare's notes, the viewer's experiment panel):
// "SM 1980 -> 1860 MHz (max 1980), power cap 412.5 ms, thermal 0.0 ms of 2500 ms",
// "not read (<why>)" when NVML could not be read, "" when the run has none
// (CPU runs, runs recorded before session 28). The throttle flag is separate
// (clocks_throttled): each reader words its warning.
std::string clocks_line(const nlohmann::json& manifest);
bool clocks_throttled(const nlohmann::json& manifest);

}  // namespace lantern::runfmt
