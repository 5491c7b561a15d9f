#pragma once
// `lantern inspect`'s communication section for tensor-parallel runs.
#include "harness/runfmt/records.h"

namespace lantern::cli {

// When the run's config has tensor_parallel (Engine::describe): the time of
// each collective op (all_reduce; all_gather with a split LM head), its share
// of the op time of the steps, per decode step, and the bus bandwidth per op
// and message size, 2(N-1)/N x bytes / time for all_reduce and (N-1)/N for
// all_gather (nccl-tests' busbw). Prints nothing otherwise.
void print_communication(const runfmt::Run& run);

}  // namespace lantern::cli
