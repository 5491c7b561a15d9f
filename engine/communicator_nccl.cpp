// NcclComm: the GPU communicator of a tensor-parallel group, one process per
// GPU. Rank 0 makes the ncclUniqueId and broadcasts it over the host
// connection (HostComm); every rank joins with ncclCommInitRank on its GPU.
// all_reduce is one ncclAllReduce on the engine's stream (so it can be
// captured into the decode CUDA graphs and shows up under the "all_reduce"
// op's NVTX range, where CUPTI attributes its kernel). NVLink SHARP /
// multicast stays off: NCCL_NVLS_ENABLE=0 is set when unset, and nothing
// here calls cuMulticastCreate.
//
// Messages up to 4 MiB (every decode step's) take the one-shot P2P kernel
// instead (kernels/cuda/allreduce_p2p.h: IPC-mapped buffers, NVLink loads,
// ~2-3 us and launched with PDL) when every rank can map every peer's memory;
// --tp-allreduce auto|nccl|p2p (else LANTERN_TP_ALLREDUCE, default auto)
// chooses: the launcher resolves it once and sends every rank the same
// choice, and `all_min` makes all ranks agree on whether P2P works.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "engine/communicator.h"
#include "kernels/base/errors.h"

#if LANTERN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kernels/base/cuda_check.h"
#include "kernels/cuda/allreduce_p2p.h"
#endif

namespace lantern {

#if LANTERN_HAVE_NCCL

bool nccl_available() {
  return true;
}

#define NCCL_CHECK(call)                                                                        \
  do {                                                                                          \
    const ncclResult_t lantern_nccl_status = (call);                                            \
    LANTERN_CHECK(lantern_nccl_status == ncclSuccess, "%s failed: %s (%s) at %s:%d", #call,     \
                  ncclGetErrorString(lantern_nccl_status), ncclGetLastError(nullptr), __FILE__, \
                  __LINE__);                                                                    \
  } while (0)

namespace {

class NcclComm final : public Communicator {
 public:
  NcclComm(std::unique_ptr<Communicator> host, int gpu, TpAllReduce path)
      : host_(std::move(host)), path_(path) {
    ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    CUDA_CHECK(cudaSetDevice(gpu));
    ncclUniqueId id{};
    std::vector<uint8_t> bytes(sizeof(id));
    if (host_->rank() == 0) {
      NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(bytes.data(), &id, sizeof(id));
    }
    host_->broadcast(bytes);
    LANTERN_CHECK(bytes.size() == sizeof(id), "ncclUniqueId of %zu bytes from rank 0, expected %zu",
                  bytes.size(), sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
    NCCL_CHECK(ncclCommInitRank(&comm_, host_->world(), id, host_->rank()));
    watchdog_ = std::thread([this] { watch(); });
    if (path_ != TpAllReduce::nccl && host_->world() > 1) setup_p2p();
  }

  // A clean end destroys the communicator; after a failure (unwinding an
  // exception, or a peer already gone) it aborts it instead, since
  // ncclCommDestroy may wait for peers that will never come.
  ~NcclComm() override {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    if (!comm_) return;
    const bool failed = std::uncaught_exceptions() > 0 || !host_->poll_peers().empty();
    release_p2p(failed);
    const ncclResult_t s = failed ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (s != ncclSuccess)
      std::fprintf(stderr, "warning: %s: %s\n", failed ? "ncclCommAbort" : "ncclCommDestroy",
                   ncclGetErrorString(s));
  }

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  const char* kind() const override { return "nccl"; }
  std::vector<std::string> all_reduce_paths() const override {
    if (p2p_.world > 1) return {"nccl", "p2p"};
    return {"nccl"};
  }
  std::string all_reduce_desc() const override {
    if (path_ == TpAllReduce::nccl || p2p_.world <= 1) return "nccl";
    return strformat("p2p up to %zu bytes, nccl above", kernels::kP2pMaxBytes);
  }
  void use_all_reduce_path(const std::string& path) override {
    LANTERN_CHECK(path == "nccl" || (path == "p2p" && p2p_.world > 1) || path == "auto",
                  "all_reduce path '%s' is not available here (paths: nccl%s, auto)", path.c_str(),
                  p2p_.world > 1 ? ", p2p" : "");
    path_ = parse_tp_all_reduce(path);
  }

  void all_reduce(void* buf, size_t count, ReduceType type, cudaStream_t stream) override {
    const bool bf16 = type == ReduceType::bf16;
    if (path_ != TpAllReduce::nccl && p2p_.world > 1 && kernels::p2p_all_reduce_fits(count * (bf16 ? 2 : 4)) &&
        reinterpret_cast<uintptr_t>(buf) % 16 == 0)
      return kernels::p2p_all_reduce(p2p_, buf, count, bf16, stream);
    NCCL_CHECK(ncclAllReduce(buf, buf, count, bf16 ? ncclBfloat16 : ncclFloat32, ncclSum, comm_, stream));
  }
  void all_gather(const void* send, void* recv, size_t count, ReduceType type,
                  cudaStream_t stream) override {
    NCCL_CHECK(ncclAllGather(send, recv, count, type == ReduceType::bf16 ? ncclBfloat16 : ncclFloat32,
                             comm_, stream));
  }
  void broadcast(std::vector<uint8_t>& bytes) override { host_->broadcast(bytes); }
  void barrier() override { host_->barrier(); }
  int64_t all_min(int64_t value) override { return host_->all_min(value); }
  void abort(const std::string& why) override {
    host_->abort(why);
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  std::string poll_peers() override { return host_->poll_peers(); }

 private:
  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  TpAllReduce path_ = TpAllReduce::automatic;
  kernels::P2pAllReduceBuffers p2p_;  // world > 1 once set up
  void* p2p_own_ = nullptr;           // this rank's exported allocation

  // Every rank exports one allocation (two data halves + flags, zeroed), the
  // handles are all-gathered over NCCL, and each rank maps its peers'. All
  // ranks use the path only if all of them mapped every peer (all_min).
  void setup_p2p() {
    const int world = host_->world(), rank = host_->rank();
    p2p_.rank = rank;
    bool ok = world <= kernels::kP2pMaxRanks;
    cudaIpcMemHandle_t* handles = nullptr;
    std::vector<cudaIpcMemHandle_t> all(world);
    if (ok) {
      CUDA_CHECK(cudaMalloc(&p2p_own_, kernels::kP2pAllocBytes));
      CUDA_CHECK(cudaMemset(p2p_own_, 0, kernels::kP2pAllocBytes));
      CUDA_CHECK(cudaMalloc(&p2p_.epochs, sizeof(uint32_t) * kernels::kP2pMaxBlocks));
      CUDA_CHECK(cudaMemset(p2p_.epochs, 0, sizeof(uint32_t) * kernels::kP2pMaxBlocks));
      CUDA_CHECK(cudaIpcGetMemHandle(&all[rank], p2p_own_));
      CUDA_CHECK(cudaMalloc(&handles, sizeof(cudaIpcMemHandle_t) * world));
      CUDA_CHECK(cudaMemcpy(handles + rank, &all[rank], sizeof(all[rank]), cudaMemcpyHostToDevice));
      NCCL_CHECK(ncclAllGather(handles + rank, handles, sizeof(cudaIpcMemHandle_t), ncclChar, comm_, nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(all.data(), handles, sizeof(cudaIpcMemHandle_t) * world, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(handles));
      p2p_.peer_base[rank] = p2p_own_;
      for (int q = 0; q < world && ok; ++q) {
        if (q == rank) continue;
        if (cudaIpcOpenMemHandle(&p2p_.peer_base[q], all[q], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
          (void)cudaGetLastError();
          p2p_.peer_base[q] = nullptr;
          ok = false;
        }
      }
    }
    const bool all_ok = host_->all_min(ok ? 1 : 0) == 1;
    LANTERN_CHECK(all_ok || path_ != TpAllReduce::p2p,
                  "--tp-allreduce p2p (or LANTERN_TP_ALLREDUCE=p2p): a rank could not map its peers' "
                  "memory (no P2P between these GPUs?); use auto or nccl");
    if (!all_ok) return release_p2p(/*failed=*/false);
    p2p_.rank = rank;
    p2p_.world = world;
    host_->barrier();  // every rank's flags are zero before anyone arrives
  }

  void release_p2p(bool failed) {
    if (!p2p_own_) return;
    // Peers may still read this rank's allocation: free it only after all are done.
    if (!failed && p2p_.world > 1) host_->barrier();
    for (int q = 0; q < kernels::kP2pMaxRanks; ++q)
      if (q != p2p_.rank && p2p_.peer_base[q]) (void)cudaIpcCloseMemHandle(p2p_.peer_base[q]);
    (void)cudaFree(p2p_.epochs);
    (void)cudaFree(p2p_own_);
    p2p_ = {};
    p2p_own_ = nullptr;
  }
  std::atomic<bool> stop_{false};
  std::thread watchdog_;

  // A rank stuck in a collective whose peer died would wait forever on the
  // GPU. Every 100 ms: a closed peer connection (after a grace period, so a
  // normal end is not mistaken for a failure) or an NCCL async error aborts
  // the communicator and exits the process with the reason.
  void watch() {
    using clock = std::chrono::steady_clock;
    clock::time_point lost{};
    std::string why;
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ncclResult_t async = ncclSuccess;
      if (comm_ && ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress)
        fail(strformat("NCCL reported %s on rank %d", ncclGetErrorString(async), rank()));
      if (why.empty()) {
        why = host_->poll_peers();
        if (!why.empty()) lost = clock::now();
      } else if (clock::now() - lost > std::chrono::seconds(3)) {
        fail(why);
      }
    }
  }

  [[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "lantern: error: %s; aborting the NCCL communicator\n", why.c_str());
    std::fflush(stderr);
    if (comm_) (void)ncclCommAbort(comm_);
    ::_exit(1);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int gpu,
                                             TpAllReduce path) {
  return std::make_unique<NcclComm>(std::move(host), gpu, path);
}

#else  // !LANTERN_HAVE_NCCL

bool nccl_available() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator>, int, TpAllReduce) {
  LANTERN_FAIL(
      "this Lantern was built without NCCL (nccl.h / libnccl not found by CMake): install "
      "NCCL next to the CUDA toolkit and rebuild, or run --tp on --device cpu");
}

#endif

}  // namespace lantern
