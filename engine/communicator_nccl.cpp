// NcclComm: the GPU communicator of a tensor-parallel group, one process per
// GPU. Rank 0 makes the ncclUniqueId and broadcasts it over the host
// connection (HostComm); every rank joins with ncclCommInitRank on its GPU.
// all_reduce is one ncclAllReduce on the engine's stream (so it can be
// captured into the decode CUDA graphs and shows up under the "all_reduce"
// op's NVTX range, where CUPTI attributes its kernel). NVLink SHARP /
// multicast stays off: NCCL_NVLS_ENABLE=0 is set when unset, and nothing
// here calls cuMulticastCreate.
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
  NcclComm(std::unique_ptr<Communicator> host, int gpu) : host_(std::move(host)) {
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
  }

  // A clean end destroys the communicator; after a failure (unwinding an
  // exception, or a peer already gone) it aborts it instead, since
  // ncclCommDestroy may wait for peers that will never come.
  ~NcclComm() override {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    if (!comm_) return;
    const bool failed = std::uncaught_exceptions() > 0 || !host_->poll_peers().empty();
    const ncclResult_t s = failed ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (s != ncclSuccess)
      std::fprintf(stderr, "warning: %s: %s\n", failed ? "ncclCommAbort" : "ncclCommDestroy",
                   ncclGetErrorString(s));
  }

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  const char* kind() const override { return "nccl"; }

  void all_reduce(void* buf, size_t count, ReduceType type, cudaStream_t stream) override {
    NCCL_CHECK(ncclAllReduce(buf, buf, count, type == ReduceType::bf16 ? ncclBfloat16 : ncclFloat32,
                             ncclSum, comm_, stream));
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

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int gpu) {
  return std::make_unique<NcclComm>(std::move(host), gpu);
}

#else  // !LANTERN_HAVE_NCCL

bool nccl_available() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator>, int) {
  LANTERN_FAIL(
      "this Lantern was built without NCCL (nccl.h / libnccl not found by CMake): install "
      "NCCL next to the CUDA toolkit and rebuild, or run --tp on --device cpu");
}

#endif

}  // namespace lantern
