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
  Communicator* connect(const nlohmann::json& setup, kernels::Backend backend, int gpu);
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

// --tp N (0: off, returns the unsharded ShardSpec): checks that N ranks can
// split the model with opt.tp_lm_head (and that N GPUs are there from
// opt.gpu on; a split LM head without --tp is an error), launches
// ranks 1..N-1, sends them the resolved engine setup (model, backend, limits,
// kernels, graphs, LM head layout, run directory) and joins the group: sets opt.comm and
// returns rank 0's shard for Weights::load.
// `harness_args` ({"values": {option: value}, "flags": [option]}: rank 0's
// harness options) make the followers record with the same CUPTI schedule
// and switches.
ShardSpec start_tp_group(int tp, const ModelConfig& cfg, const std::filesystem::path& model_dir,
                         const std::string& record_dir, bool quiet, EngineOptions& opt,
                         const nlohmann::json& harness_args = nlohmann::json::object());

// The group of this process when it is rank 0 of a `--tp` run (else null).
std::unique_ptr<TpGroup>& current_tp_group();

}  // namespace lantern::cli
