#pragma once
// metrics.json: latency and throughput of a run (TTFT, TPOT, tokens/s),
// step times per phase, memory, and the harness's own health counters.
#include <nlohmann/json.hpp>
#include <vector>

#include "harness/runfmt/records.h"
#include "harness/timeline.h"

namespace lantern::harness {

// {"mean", "p50", "p90", "p99", "max", "count"} of `values` (zeros when empty).
nlohmann::json distribution(std::vector<double> values);

// Request-level metrics from the outputs, step-level metrics from the
// timeline (may be null when the harness was off).
nlohmann::json compute_metrics(const std::vector<runfmt::OutputRow>& outputs,
                               const Timeline* timeline);

}  // namespace lantern::harness
