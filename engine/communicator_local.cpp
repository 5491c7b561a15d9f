// LocalGroup: simulated tensor-parallel ranks as threads of one process, for
// the CPU backend. Each collective is a generation-counted rendezvous: every
// rank posts its buffer, the last to arrive computes the result (sums in rank
// order, so the result does not depend on arrival order), and all leave once
// every rank has copied it out. Also the small helpers every communicator
// shares (element sizes, the --tp-allreduce choice).
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/communicator.h"
#include "kernels/base/errors.h"

namespace lantern {

size_t reduce_type_bytes(ReduceType t) {
  return t == ReduceType::f32 ? 4 : 2;
}

const char* tp_all_reduce_name(TpAllReduce p) {
  return p == TpAllReduce::nccl ? "nccl" : p == TpAllReduce::p2p ? "p2p" : "auto";
}

TpAllReduce parse_tp_all_reduce(const std::string& s, bool from_env) {
  if (s == "auto") return TpAllReduce::automatic;
  if (s == "nccl") return TpAllReduce::nccl;
  if (s == "p2p") return TpAllReduce::p2p;
  LANTERN_FAIL("%s%s%s: use auto (the P2P kernel up to 4 MiB when the GPUs can map each other, else "
               "NCCL), nccl or p2p",
               from_env ? "LANTERN_TP_ALLREDUCE=" : "--tp-allreduce '", s.c_str(), from_env ? "" : "'");
}

TpAllReduce tp_all_reduce_from_env() {
  const char* env = std::getenv("LANTERN_TP_ALLREDUCE");
  return env ? parse_tp_all_reduce(env, /*from_env=*/true) : TpAllReduce::automatic;
}

namespace {

struct LocalShared {
  explicit LocalShared(int w) : world(w), posted(w, nullptr) {}
  const int world;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;  // completed rendezvous
  int arrived = 0, departed = 0;
  std::vector<void*> posted;  // per rank: its buffer in this rendezvous
  std::vector<float> sum;
  std::vector<uint8_t> bytes;
  int64_t min_value = 0;
  std::string aborted;

  void check_aborted() {
    LANTERN_CHECK(aborted.empty(), "tensor-parallel group aborted: %s", aborted.c_str());
  }

  // All ranks call with their part; `last` runs once, when the last arrives,
  // `after` runs on every rank once `last` has; returns when all have left.
  template <class Last, class After>
  void rendezvous(int rank, void* mine, Last last, After after) {
    std::unique_lock<std::mutex> lock(mu);
    check_aborted();
    cv.wait(lock, [&] { return departed == 0 || !aborted.empty(); });  // previous one emptied
    check_aborted();
    const uint64_t gen = generation;
    posted[rank] = mine;
    if (++arrived == world) {
      last();
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !aborted.empty(); });
      check_aborted();
    }
    after();
    if (++departed == world) {
      arrived = departed = 0;
      cv.notify_all();
    }
  }
};

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<LocalShared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return s_->world; }
  const char* kind() const override { return "local"; }

  void all_reduce(void* buf, size_t count, ReduceType type, cudaStream_t) override {
    LANTERN_CHECK(type == ReduceType::f32,
                  "simulated tensor-parallel ranks run on the CPU backend (f32)");
    LocalShared& s = *s_;
    s.rendezvous(
        rank_, buf,
        [&] {
          s.sum.assign(count, 0.0f);
          for (int r = 0; r < s.world; ++r) {
            const float* p = static_cast<const float*>(s.posted[r]);
            for (size_t i = 0; i < count; ++i) s.sum[i] += p[i];
          }
        },
        [&] { std::memcpy(buf, s.sum.data(), count * 4); });
  }

  void all_gather(const void* send, void* recv, size_t count, ReduceType type,
                  cudaStream_t) override {
    LocalShared& s = *s_;
    const size_t part = count * reduce_type_bytes(type);
    // The last to arrive copies every part out while all senders still wait
    // (a rank may reuse its send buffer as soon as it leaves).
    s.rendezvous(
        rank_, const_cast<void*>(send),
        [&] {
          s.bytes.resize(part * s.world);
          for (int r = 0; r < s.world; ++r) std::memcpy(s.bytes.data() + r * part, s.posted[r], part);
        },
        [&] { std::memcpy(recv, s.bytes.data(), part * s.world); });
  }

  void broadcast(std::vector<uint8_t>& bytes) override {
    LocalShared& s = *s_;
    s.rendezvous(
        rank_, &bytes, [&] { s.bytes = *static_cast<std::vector<uint8_t>*>(s.posted[0]); },
        [&] {
          if (rank_ != 0) bytes = s.bytes;
        });
  }

  void barrier() override {
    s_->rendezvous(
        rank_, nullptr, [] {}, [] {});
  }

  int64_t all_min(int64_t value) override {
    LocalShared& s = *s_;
    int64_t result = value;
    s.rendezvous(
        rank_, &value,
        [&] {
          s.min_value = *static_cast<int64_t*>(s.posted[0]);
          for (int r = 1; r < s.world; ++r)
            s.min_value = std::min(s.min_value, *static_cast<int64_t*>(s.posted[r]));
        },
        [&] { result = s.min_value; });
    return result;
  }

  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->aborted.empty()) s_->aborted = strformat("rank %d: %s", rank_, why.c_str());
    s_->cv.notify_all();
  }

 private:
  std::shared_ptr<LocalShared> s_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int world) {
  LANTERN_CHECK(world >= 1, "a tensor-parallel group needs at least one rank, got %d", world);
  auto shared = std::make_shared<LocalShared>(world);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world; ++r) comms.push_back(std::make_unique<LocalComm>(shared, r));
  return comms;
}

}  // namespace lantern
