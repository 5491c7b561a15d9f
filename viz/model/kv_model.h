#pragma once
// KV occupancy from kv.json: which sequence owns each block after each step
// (replayed from the alloc/free events), binned to a heatmap of
// block-bins x step-bins; block tables at a step; admissions, preemptions and
// finishes of sequences.
#include <cstdint>
#include <map>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::view {

// The pool after each recorded step (kv.json "steps" order): column c is the
// state after step steps[c].
struct KvHeatmap {
  int block_bins = 0, step_bins = 0;
  int blocks_per_bin = 1, steps_per_bin = 1;
  std::vector<int64_t> steps;      // step number of each step column (unbinned)
  // [step_bin * block_bins + block_bin]: fraction of the bin's blocks in use at
  // the bin's last step, and the sequence owning the most of them (-1 none).
  std::vector<float> used;
  std::vector<int64_t> owner;
};

// Bins `kv.total_blocks` blocks into at most `max_block_bins` rows and the
// steps into at most `max_step_bins` columns. O(events + bins).
KvHeatmap bin_kv(const runfmt::KvData& kv, int max_block_bins, int max_step_bins);

// Owner of every block after `step` (-1: free). Blocks past total_blocks are ignored.
std::vector<int64_t> owners_at(const runfmt::KvData& kv, int64_t step);

// Block table of every live sequence after `step`: seq -> layer -> blocks in
// allocation order.
std::map<int64_t, std::map<int, std::vector<int32_t>>> block_tables_at(const runfmt::KvData& kv,
                                                                       int64_t step);

struct SeqEvent {
  enum Kind { admit, preempt, finish } kind = admit;
  int64_t step = 0;
  int64_t seq = 0;
};
// A sequence is admitted at its first allocation (again after a preemption),
// preempted when it drops to zero blocks and later allocates again, finished
// at its last drop to zero.
std::vector<SeqEvent> sequence_events(const runfmt::KvData& kv);

}  // namespace lantern::view
