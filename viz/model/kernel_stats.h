#pragma once
// The kernel statistics table: kernel rows (timeline index "kernels") grouped
// per op or per family.variant, with count, total, mean, p50, p99, achieved
// GB/s and TFLOP/s, % of roofline, share of step time and wall time; sorting
// and a substring filter.
#include <cstdint>
#include <string>
#include <vector>

#include "viz/model/run_data.h"

namespace lantern::view {

enum class StatsGroup { op, family_variant, kernel };

struct KernelStat {
  std::string key;            // "q_proj", "gemm.cublas", or the kernel name
  std::string family_variant; // "gemm.cublas" (per op: the op's variant; mixed: "*")
  int64_t count = 0;
  double total_us = 0, mean_us = 0, p50_us = 0, p99_us = 0;
  double bytes = 0, flops = 0;
  double gb_per_s = 0, tflop_per_s = 0;  // NaN when no bytes / FLOPs
  double pct_roofline = 0;               // NaN without a roofline
  double share_of_steps = 0;             // total / time of the steps the rows cover (0..1)
  // Time on the steps' busy path (runfmt::interval_shares: each kernel's end
  // past the latest end before it in its step on its device) and its share of
  // all the rows' path time: what removing the group's work could save where
  // launches overlap (PDL), unlike total_us.
  double wall_us = 0, wall_share = 0;
};

// Groups every kernel row. `phase` filters ("" all). Share: of the summed
// durations of the steps that hold the rows (host step ranges), or of the
// rows' total when the run has no step ranges.
std::vector<KernelStat> kernel_stats(const RunData& run, StatsGroup by, const std::string& phase = "");

enum class StatsColumn { key, count, total, mean, p50, p99, gb_per_s, tflop_per_s, pct_roofline, share, wall };
// Stable sort by a column (NaN last in either direction).
void sort_stats(std::vector<KernelStat>& stats, StatsColumn column, bool ascending);
// Indices of rows whose key or family.variant contains `filter` (case-insensitive).
std::vector<size_t> filter_stats(const std::vector<KernelStat>& stats, const std::string& filter);

// Nearest-rank percentile of `values` (sorted in place), p in [0, 100].
double percentile(std::vector<double>& values, double p);

}  // namespace lantern::view
