#include "harness/cli/tp_launch.h"

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/tensor_parallel.h"
#include "harness/cli/command.h"
#include "harness/cli/commbench.h"
#include "harness/harness_options.h"
#include "harness/session.h"
#include "harness/tp_merge.h"
#include "kernels/base/errors.h"
#include "kernels/gemm_plan.h"

namespace lantern::cli {

namespace {

double tp_timeout_s() {
  const char* t = std::getenv("LANTERN_TP_TIMEOUT_S");
  return t && std::atof(t) > 0 ? std::atof(t) : 600.0;
}

void keep_nvls_off() {
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

}  // namespace

std::unique_ptr<TpGroup>& current_tp_group() {
  static std::unique_ptr<TpGroup> group;
  return group;
}

bool is_tp_follower(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a == "--tp-rank") return true;
  return false;
}

// ---- rank 0
std::unique_ptr<TpGroup> TpGroup::launch(int world) {
  keep_nvls_off();  // inherited by the followers
  auto g = std::make_unique<TpGroup>();
  g->world_ = world;
  g->pids_.assign(world, -1);
  g->status_.assign(world, -1);
  g->fds_.assign(world, -1);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  LANTERN_CHECK(n > 0, "cannot find this executable (/proc/self/exe): %s", std::strerror(errno));
  self[n] = '\0';
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 1; r < world; ++r) {
    int sv[2];
    LANTERN_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s",
                  std::strerror(errno));
    const pid_t pid = ::fork();
    LANTERN_CHECK(pid >= 0, "fork of tensor-parallel rank %d failed: %s", r, std::strerror(errno));
    if (pid == 0) {
      // The child keeps its end across exec (no CLOEXEC on a dup).
      const int fd = ::dup(sv[1]);
      const std::string rank = std::to_string(r), ws = std::to_string(world),
                        fds = std::to_string(fd);
      ::execl(self, self, "follow", "--tp-rank", rank.c_str(), "--tp-world", ws.c_str(), "--tp-fd",
              fds.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "lantern: exec of tensor-parallel rank %d (%s) failed: %s\n", r, self,
                   std::strerror(errno));
      ::_exit(127);
    }
    ::close(sv[1]);
    g->pids_[r] = pid;
    g->fds_[r] = sv[0];
  }
  return g;
}

Communicator* TpGroup::connect(const nlohmann::json& setup, kernels::Backend backend, int gpu,
                               TpAllReduce all_reduce) {
  HostCommOptions o;
  o.rank = 0;
  o.world = world_;
  o.fds = fds_;
  fds_.assign(world_, -1);  // the communicator owns them now
  o.peer_status = [this](int r) { return status_of(r); };
  o.timeout_s = tp_timeout_s();
  std::unique_ptr<Communicator> host = make_host_comm(std::move(o));
  std::vector<uint8_t> bytes;
  const std::string text = setup.dump();
  bytes.assign(text.begin(), text.end());
  host->broadcast(bytes);
  comm_ = backend == kernels::Backend::cuda ? make_nccl_comm(std::move(host), gpu, all_reduce)
                                            : std::move(host);
  return comm_.get();
}

bool TpGroup::reap(int r, bool block) {
  if (pids_[r] <= 0 || status_[r] != -1) return status_[r] != -1;
  int st = 0;
  const pid_t got = ::waitpid(pids_[r], &st, block ? 0 : WNOHANG);
  if (got == pids_[r]) status_[r] = st;
  return status_[r] != -1;
}

std::string TpGroup::status_of(int r) {
  // A closed connection comes just before the exit: give it a moment.
  for (int i = 0; i < 20 && !reap(r, false); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (status_[r] == -1) return "";
  const int st = status_[r];
  if (WIFSIGNALED(st))
    return strformat("(pid %d) was killed by signal %d (%s)", pids_[r], WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
  return strformat("(pid %d) exited with status %d", pids_[r], WEXITSTATUS(st));
}

std::string TpGroup::finish(bool command_failed) {
  // Closing the connections makes a follower still waiting exit; after a
  // failure the communicator is aborted first, so nothing waits on a peer.
  if (comm_ && command_failed) comm_->abort("rank 0 failed");
  comm_.reset();
  std::string failure;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int r = 1; r < world_; ++r) {
    while (!reap(r, false) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!reap(r, false)) {
      ::kill(pids_[r], SIGKILL);
      reap(r, true);
      if (failure.empty())
        failure = strformat("tensor-parallel rank %d did not exit; killed it", r);
    }
    const int st = status_[r];
    if (failure.empty() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      failure = strformat("tensor-parallel rank %d %s", r, status_of(r).c_str());
  }
  pids_.assign(world_, -1);
  if (failure.empty() && !record_dir_.empty()) {
    const std::string merged = harness::merge_rank_runs(record_dir_, world_);
    if (!merged.empty()) std::fprintf(stderr, "lantern: %s\n", merged.c_str());
  }
  return failure;
}

TpGroup::~TpGroup() {
  comm_.reset();
  for (int r = 1; r < world_; ++r)
    if (pids_.size() > static_cast<size_t>(r) && pids_[r] > 0 && !reap(r, false)) {
      ::kill(pids_[r], SIGKILL);
      reap(r, true);
    }
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

namespace {

// --tp N on cuda needs GPUs --gpu .. --gpu+N-1.
void check_gpu_count(int tp, int first_gpu) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    (void)cudaGetLastError();
    gpus = 0;
  }
  LANTERN_CHECK(first_gpu + tp <= gpus,
                "--tp %d needs %d GPUs (one per rank, GPUs %d..%d) but found %d GPU%s: lower --tp or "
                "run on a machine with more GPUs",
                tp, tp, first_gpu, first_gpu + tp - 1, gpus, gpus == 1 ? "" : "s");
}

}  // namespace

nlohmann::json tp_setup_json(const TpLaunch& launch, const std::filesystem::path& model_dir,
                             const EngineOptions& opt) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& [family, variant] : opt.kernels) kernels.push_back({family, variant});
  nlohmann::json setup = {{"model", model_dir.string()},
                          {"backend", kernels::backend_name(opt.backend)},
                          {"gpu", opt.gpu},
                          {"limits", opt.limits.to_json()},
                          {"cuda_graphs", opt.use_cuda_graphs},
                          {"kernels", kernels},
                          {"tp_lm_head", tp_lm_head_name(opt.tp_lm_head)},
                          {"all_reduce", tp_all_reduce_name(opt.tp_all_reduce)},
                          {"record", launch.record_dir},
                          {"harness", launch.harness_args},
                          {"quiet", launch.quiet}};
  if (!launch.gemm_plans.empty()) setup["gemm_plans"] = launch.gemm_plans;
  return setup;
}

ShardSpec start_tp_group(const TpLaunch& launch, const ModelConfig& cfg,
                         const std::filesystem::path& model_dir, EngineOptions& opt) {
  const int tp = launch.tp;
  if (tp == 0) {
    LANTERN_CHECK(opt.tp_lm_head == TpLmHead::replicated,
                  "--tp-lm-head split needs tensor parallelism: add --tp N");
    return ShardSpec{};
  }
  check_shardable(cfg, tp, opt.tp_lm_head);
  if (opt.backend == kernels::Backend::cuda) check_gpu_count(tp, opt.gpu);
  auto& group = current_tp_group();
  LANTERN_CHECK(!group, "one tensor-parallel engine per process");
  group = TpGroup::launch(tp);
  group->set_record_dir(launch.record_dir);
  opt.comm = group->connect(tp_setup_json(launch, model_dir, opt), opt.backend, opt.gpu,
                            opt.tp_all_reduce);
  if (!launch.quiet)
    std::fprintf(stderr, "lantern: tensor parallel over %d rank%s (%s communicator%s)\n", tp,
                 tp == 1 ? "" : "s", opt.comm->kind(),
                 opt.tp_lm_head == TpLmHead::split ? ", LM head split by vocabulary" : "");
  return ShardSpec{0, tp, opt.tp_lm_head};
}

// ---- ranks > 0
namespace {

// The engine options rank `rank` builds from rank 0's setup (its GPU is
// setup.gpu + rank).
EngineOptions follower_options(const nlohmann::json& setup, int rank) {
  EngineOptions opt;
  opt.backend = setup.at("backend") == "cuda" ? kernels::Backend::cuda : kernels::Backend::cpu;
  opt.gpu = setup.at("gpu").get<int>() + rank;
  opt.limits = EngineLimits::from_json(setup.at("limits"));
  opt.use_cuda_graphs = setup.at("cuda_graphs").get<bool>();
  for (const auto& k : setup.at("kernels")) opt.kernels.emplace_back(k.at(0), k.at(1));
  opt.tp_lm_head = parse_tp_lm_head(setup.value("tp_lm_head", "replicated"));
  opt.tp_all_reduce = parse_tp_all_reduce(setup.value("all_reduce", "auto"));
  return opt;
}

// With --record on rank 0, each follower records its own run directory
// RUN/rank-R (NVTX, CUPTI, memory map of this rank's process) with rank 0's
// harness options.
harness::HarnessOptions follower_harness(const nlohmann::json& setup, int rank) {
  const std::string record = setup.value("record", "");
  harness::HarnessOptions ho;
  const nlohmann::json harness_args = setup.value("harness", nlohmann::json::object());
  if (!record.empty() && harness_args.contains("values")) {
    std::map<std::string, std::string> values = harness_args["values"];
    std::set<std::string> flags = harness_args.value("flags", std::set<std::string>{});
    ho = harness::harness_options_from(values, flags);
  }
  ho.enabled = ho.enabled && !record.empty();
  if (ho.enabled) {
    ho.record_dir = std::filesystem::path(record) / ("rank-" + std::to_string(rank));
    ho.print_summary = false;
  }
  return ho;
}

// `lantern rerun`: this rank's recorded GEMM plans and the manifest they
// come from (none when the setup has no plans for this rank).
std::vector<kernels::GemmPlan> follower_gemm_plans(const nlohmann::json& setup, int rank,
                                                   std::string* source) {
  if (!setup.contains("gemm_plans") || rank >= static_cast<int>(setup.at("gemm_plans").size()))
    return {};
  const nlohmann::json& mine = setup.at("gemm_plans").at(rank);
  if (source) *source = mine.value("source", "");
  return gemm_plans_from_json(mine.value("plans", nlohmann::json::array()));
}

// `lantern commbench --tp N`: this rank's part of every path's measurement.
int follow_commbench(const nlohmann::json& setup, std::unique_ptr<Communicator> host, int rank) {
  const auto backend =
      setup.at("backend") == "cuda" ? kernels::Backend::cuda : kernels::Backend::cpu;
  const int gpu = setup.at("gpu").get<int>() + rank;
  std::unique_ptr<Communicator> comm =
      backend == kernels::Backend::cuda ? make_nccl_comm(std::move(host), gpu) : std::move(host);
  run_commbench_paths(*comm, backend, gpu, setup.at("sizes").get<std::vector<size_t>>(),
                      setup.at("iters").get<int>());
  return 0;
}

}  // namespace

int tp_follower_main(const std::vector<std::string>& argv) {
  Args args(argv, {"--tp-rank", "--tp-world", "--tp-fd"}, {});
  const int world = static_cast<int>(args.get_int("--tp-world", 0, 2, 1024));
  const int rank = static_cast<int>(args.get_int("--tp-rank", 0, 1, world - 1));
  const int fd = static_cast<int>(args.get_int("--tp-fd", -1, 0, 1 << 20));
  keep_nvls_off();
  HostCommOptions o;
  o.rank = rank;
  o.world = world;
  o.fds = {fd};
  o.timeout_s = tp_timeout_s();
  std::unique_ptr<Communicator> host = make_host_comm(std::move(o));
  std::vector<uint8_t> bytes;
  host->broadcast(bytes);  // the setup
  const nlohmann::json setup = nlohmann::json::parse(bytes.begin(), bytes.end());
  if (setup.value("mode", "engine") == "commbench")
    return follow_commbench(setup, std::move(host), rank);
  const ModelConfig cfg = ModelConfig::load(setup.at("model").get<std::string>());
  EngineOptions opt = follower_options(setup, rank);
  std::string plans_source;
  std::vector<kernels::GemmPlan> pins = follower_gemm_plans(setup, rank, &plans_source);
  if (!pins.empty() && !setup.value("quiet", false))
    std::fprintf(stderr, "lantern rank %d: pins %zu GEMM plan%s recorded in %s\n", rank,
                 pins.size(), pins.size() == 1 ? "" : "s", plans_source.c_str());
  if (!pins.empty()) kernels::pin_gemm_plans(std::move(pins));
  std::unique_ptr<Communicator> comm =
      opt.backend == kernels::Backend::cuda
          ? make_nccl_comm(std::move(host), opt.gpu, opt.tp_all_reduce)
          : std::move(host);
  opt.comm = comm.get();
  const harness::HarnessOptions ho = follower_harness(setup, rank);
  harness::Session session(ho);
  if (ho.enabled) session.apply(opt);
  // Quiet: rank 0 reports the load.
  Weights w = Weights::load(
      cfg, setup.at("model").get<std::string>(), opt.backend, [](size_t, size_t) {}, opt.gpu,
      ShardSpec{rank, world, opt.tp_lm_head});
  {
    Engine engine(cfg, std::move(w), opt);
    session.set_command(
        {"follow", "--tp-rank", std::to_string(rank), "--tp-world", std::to_string(world)});
    session.set_config(engine.describe());
    engine.follow();
    if (ho.enabled) session.finish(engine);
  }
  return 0;
}

}  // namespace lantern::cli
