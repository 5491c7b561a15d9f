#pragma once
// The all_reduce benchmark every rank of `lantern commbench` runs in lockstep
// (nccl-tests' all_reduce_perf, through Lantern's own Communicator, so the
// numbers compare with the all_reduce op of a tensor-parallel run).
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/communicator.h"

namespace lantern::cli {

struct CommbenchRow {
  size_t bytes = 0;
  double us = 0;         // median time of one all_reduce
  double algbw_gbs = 0;  // bytes / time
  double busbw_gbs = 0;  // 2 (N - 1) / N x algbw
  double graph_us = 0;   // cuda: per call, `iters` calls back to back in one replayed CUDA graph
                         // (as in a decode step: no launch cost, no sync between calls)
};
struct CommbenchPath {
  std::string path;  // "nccl", "p2p", "host", "local"
  std::vector<CommbenchRow> rows;
};

// cuda: bf16 buffers on GPU `gpu`, timed with CUDA events on one stream;
// cpu: f32 host buffers, steady clock. Every rank must call it with the
// same sizes and iterations.
std::vector<CommbenchRow> run_commbench(Communicator& comm, kernels::Backend backend, int gpu,
                                        const std::vector<size_t>& sizes, int iters);
nlohmann::json commbench_json(const std::vector<CommbenchRow>& rows);
// run_commbench once per all_reduce path the communicator offers
// (Communicator::all_reduce_paths), then back to "auto"; every rank calls it.
std::vector<CommbenchPath> run_commbench_paths(Communicator& comm, kernels::Backend backend, int gpu,
                                               const std::vector<size_t>& sizes, int iters);

}  // namespace lantern::cli
