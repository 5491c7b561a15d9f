#pragma once
// Tensor-parallel run directories: rank 0 records RUN/, rank R > 0 records
// RUN/rank-R/ (each a complete run directory). merge_rank_runs writes, into
// RUN/, the views across ranks (docs/tensor-parallel.md, docs/run-format.md):
//   trace_ranks.json   every rank's trace.json, one Perfetto process per rank
//                      and track (pid = 10 * rank + the rank's own pid; names
//                      prefixed "rank R")
//   kernels_ranks.csv  every rank's kernels.csv with a leading `rank` column
#include <string>

namespace lantern::harness {

// Returns a one-line summary of what was merged ("" when there was nothing).
std::string merge_rank_runs(const std::string& run_dir, int world);

}  // namespace lantern::harness
