#pragma once
// `lantern compare`: runs side by side. Serving metrics (median of the
// repetitions), per-op kernel time per call and per-family kernel time per
// traced step, each with its ratio to the first run and a mark where the
// difference lies outside the noise band measured from the repetitions;
// then the config diff. Peers' run directories (experiments/peers/) hold
// only manifest.json and metrics.json and compare on the metrics.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/experiment/table.h"
#include "harness/runfmt/records.h"

namespace lantern::experiment {

struct CompareRun {
  std::string dir, name;
  nlohmann::json manifest, metrics;
  std::vector<runfmt::KernelRow> kernels;  // empty when kernels.csv is absent
};

// manifest.json and metrics.json required, kernels.csv optional. Throws one
// line naming the directory and the missing file.
CompareRun load_compare_run(const std::filesystem::path& dir);

// A metric of a run: the median over repetitions when the run has them.
struct MetricValue {
  bool present = false;
  double value = 0;
  double spread = -1;  // (max - min) / median over repetitions; -1: one repetition
};
MetricValue metric_value(const CompareRun& run, const std::string& key);

// Mark for `value` against `base`: "*" outside the noise band (the larger
// spread of the two runs), "~" within it, "" when either run has no band.
std::string noise_mark(const MetricValue& base, const MetricValue& value);

// Kernel tables (when a run has kernels.csv rows): per op call, per family per
// traced step, and `path`: each op's share of its steps' critical path -- every
// kernel charged only the time by which it moved its step's end (kernels of a
// step sorted by start), since PDL-launched kernels start early and wait, so
// their CUPTI durations overlap (scripts/critical_path.py's rule; rank 0's
// device only).
struct Comparison {
  Table metrics, ops, families, path, config;
};
Comparison compare_runs(const std::vector<CompareRun>& runs);

}  // namespace lantern::experiment
