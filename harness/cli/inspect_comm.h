#pragma once
// `lantern inspect`'s communication section for tensor-parallel runs.
#include "harness/runfmt/records.h"

namespace lantern::cli {

// When the run's config has tensor_parallel (Engine::describe): the
// all_reduce time, its share of the op time of the steps, per decode step,
// and the bus bandwidth per message size, 2(N-1)/N x bytes / time (what
// nccl-tests' all_reduce_perf calls busbw). Prints nothing otherwise.
void print_communication(const runfmt::Run& run);

}  // namespace lantern::cli
