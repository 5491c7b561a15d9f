#pragma once
// `--tp N` on one host: one process per rank. Rank 0 (the process the user
// started) re-executes itself N-1 times with hidden arguments
// `--tp-rank r --tp-world N --tp-fd FD` (FD: its end of a socketpair to rank
// 0), sends each the engine setup it resolved (model, backend, limits,
// kernels), and runs the command with the scheduler; the others build the
// same engine on their shard and follow the step plans rank 0 broadcasts
// (Engine::follow). See docs/tensor-parallel.md.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine/tensor_parallel.h"

namespace lantern::cli {

// Whether argv (after the command name) is a follower rank's.
bool is_tp_follower(const std::vector<std::string>& argv);
// A follower rank's whole life: join, build the engine, follow, exit status.
int tp_follower_main(const std::vector<std::string>& argv);

// Rank 0's view of the group it launched.
class TpGroup {
 public:
  // Forks and execs ranks 1..world-1 and connects to them.
  static std::unique_ptr<TpGroup> launch(int world);
  ~TpGroup();
  // Sends the setup to the followers and makes rank 0's communicator
  // (host on cpu, NCCL on cuda: then every rank joins the NCCL group).
  Communicator* connect(const nlohmann::json& setup, kernels::Backend backend, int gpu,
                        TpAllReduce all_reduce = tp_all_reduce_from_env());
  int world() const { return world_; }
  // Rank 0's run directory (--record): followers record into RUN/rank-R, and
  // finish() merges the ranks' traces and kernel tables into RUN.
  void set_record_dir(const std::string& dir) { record_dir_ = dir; }
  // After the engine is gone: ends the communicator (aborts it when the
  // command failed, `command_failed`), waits for the followers (a few
  // seconds at most, then kills them). Returns the first failure's
  // description, or "".
  std::string finish(bool command_failed);
  // "exited with status 3" / "was killed by signal 9" / "" while running.
  std::string status_of(int rank);

 private:
  int world_ = 1;
  std::vector<int> pids_;    // [world], pids_[0] unused
  std::vector<int> status_;  // waitpid status once reaped, else -1
  std::vector<int> fds_;     // rank 0's ends
  std::unique_ptr<Communicator> comm_;
  std::string record_dir_;
  bool reap(int rank, bool block);
};

// What `--tp` needs besides the engine options (which carry the LM-head
// layout, opt.tp_lm_head, and the all_reduce choice, opt.tp_all_reduce).
struct TpLaunch {
  int tp = 0;              // --tp N (0: off)
  std::string record_dir;  // rank 0's run directory; followers record into RUN/rank-R ("": none)
  bool quiet = false;      // no load lines (followers: no "pins" line either)
  // Rank 0's harness options ({"values": {option: value}, "flags": [option]}),
  // so the followers record with the same CUPTI schedule and switches.
  nlohmann::json harness_args = nlohmann::json::object();
  // `lantern rerun`: rank r pins gemm_plans[r] ({"source": manifest path,
  // "plans": its config.gemm_plans}) before it builds its engine, so every rank
  // runs the recorded cuBLASLt algorithms; empty: every rank times its own.
  std::vector<nlohmann::json> gemm_plans;
};

// launch.tp == 0: off, returns the unsharded ShardSpec. Else checks that N
// ranks can split the model with opt.tp_lm_head (and that N GPUs are there
// from opt.gpu on; a split LM head without --tp is an error), launches
// ranks 1..N-1, sends them the resolved engine setup (tp_setup_json) and
// joins the group: sets opt.comm (made with opt.tp_all_reduce) and returns
// rank 0's shard for Weights::load.
ShardSpec start_tp_group(const TpLaunch& launch, const ModelConfig& cfg,
                         const std::filesystem::path& model_dir, EngineOptions& opt);

// The setup rank 0 sends every follower (one JSON, the same for all ranks):
// model directory, backend, gpu, limits, kernels, CUDA graphs, LM head,
// all_reduce choice, run directory, harness options, quiet, recorded plans.
nlohmann::json tp_setup_json(const TpLaunch& launch, const std::filesystem::path& model_dir,
                             const EngineOptions& opt);

// The group of this process when it is rank 0 of a `--tp` run (else null).
std::unique_ptr<TpGroup>& current_tp_group();

}  // namespace lantern::cli
