// HostComm: tensor-parallel ranks as processes of one host, connected to
// rank 0 by stream sockets (the launcher's socketpairs). Used on the CPU
// backend for everything, and under NCCL for the plan broadcast, barriers and
// the ncclUniqueId. Every wait is a poll() with a timeout, and every closed
// connection is an error naming the rank, so no rank waits forever on a dead
// peer.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "engine/communicator.h"
#include "kernels/base/errors.h"

namespace lantern {

namespace {

class HostComm final : public Communicator {
 public:
  explicit HostComm(HostCommOptions o) : o_(std::move(o)) {
    LANTERN_CHECK(o_.world >= 1 && o_.rank >= 0 && o_.rank < o_.world,
                  "tensor-parallel rank %d of %d", o_.rank, o_.world);
    const size_t need = o_.rank == 0 ? static_cast<size_t>(o_.world) : 1;
    LANTERN_CHECK(o_.fds.size() == need || o_.world == 1,
                  "rank %d of %d needs %zu sockets, got %zu", o_.rank, o_.world, need,
                  o_.fds.size());
  }
  ~HostComm() override {
    for (size_t i = 0; i < o_.fds.size(); ++i)
      if (o_.fds[i] >= 0 && (o_.rank != 0 || i > 0)) ::close(o_.fds[i]);
  }
  int rank() const override { return o_.rank; }
  int world() const override { return o_.world; }
  const char* kind() const override { return "host"; }

  void all_reduce(void* buf, size_t count, ReduceType type, cudaStream_t) override {
    LANTERN_CHECK(type == ReduceType::f32,
                  "the host communicator sums f32 buffers (CPU backend); "
                  "GPU ranks use NCCL");
    const size_t bytes = count * 4;
    if (o_.world == 1) return;
    if (o_.rank != 0) {
      send(0, buf, bytes);
      recv(0, buf, bytes);
      return;
    }
    // Rank order, as the simulated ranks sum: 0 + 1 + ... + (N-1).
    sum_.assign(static_cast<const float*>(buf), static_cast<const float*>(buf) + count);
    part_.resize(count);
    for (int r = 1; r < o_.world; ++r) {
      recv(r, part_.data(), bytes);
      for (size_t i = 0; i < count; ++i) sum_[i] += part_[i];
    }
    std::memcpy(buf, sum_.data(), bytes);
    for (int r = 1; r < o_.world; ++r) send(r, buf, bytes);
  }

  // Star through rank 0, as all_reduce: the parts go up, the whole comes back.
  void all_gather(const void* mine, void* all, size_t count, ReduceType type,
                  cudaStream_t) override {
    const size_t part = count * reduce_type_bytes(type);
    char* out = static_cast<char*>(all);
    if (o_.rank != 0) {
      send(0, mine, part);
      recv(0, out, part * o_.world);
      return;
    }
    std::memcpy(out, mine, part);
    for (int r = 1; r < o_.world; ++r) recv(r, out + r * part, part);
    for (int r = 1; r < o_.world; ++r) send(r, out, part * o_.world);
  }

  void broadcast(std::vector<uint8_t>& bytes) override {
    if (o_.world == 1) return;
    if (o_.rank == 0) {
      const uint64_t n = bytes.size();
      for (int r = 1; r < o_.world; ++r) {
        send(r, &n, 8);
        send(r, bytes.data(), bytes.size());
      }
      return;
    }
    uint64_t n = 0;
    recv(0, &n, 8);
    LANTERN_CHECK(n < (1ull << 32), "tensor-parallel broadcast of %llu bytes: corrupt stream",
                  static_cast<unsigned long long>(n));
    bytes.resize(n);
    recv(0, bytes.data(), n);
  }

  void barrier() override {
    if (o_.world == 1) return;
    uint8_t token = 0;
    if (o_.rank != 0) {
      send(0, &token, 1);
      recv(0, &token, 1);
      return;
    }
    for (int r = 1; r < o_.world; ++r) recv(r, &token, 1);
    for (int r = 1; r < o_.world; ++r) send(r, &token, 1);
  }

  int64_t all_min(int64_t value) override {
    if (o_.world == 1) return value;
    if (o_.rank != 0) {
      send(0, &value, 8);
      recv(0, &value, 8);
      return value;
    }
    for (int r = 1; r < o_.world; ++r) {
      int64_t v = 0;
      recv(r, &v, 8);
      value = std::min(value, v);
    }
    for (int r = 1; r < o_.world; ++r) send(r, &value, 8);
    return value;
  }

  void abort(const std::string&) override {
    // Shut the connections: every peer's next wait ends with "connection closed".
    for (size_t i = 0; i < o_.fds.size(); ++i)
      if (o_.fds[i] >= 0 && (o_.rank != 0 || i > 0)) ::shutdown(o_.fds[i], SHUT_RDWR);
  }

  std::string poll_peers() override {
    for (int peer = 0; peer < o_.world; ++peer) {
      if (peer == o_.rank || (o_.rank != 0 && peer != 0)) continue;
      pollfd p{fd(peer), POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return gone(peer);
    }
    return "";
  }

 private:
  HostCommOptions o_;
  std::vector<float> sum_, part_;

  int fd(int peer) const { return o_.fds[o_.rank == 0 ? peer : 0]; }

  std::string gone(int peer) const {
    std::string status = o_.peer_status ? o_.peer_status(peer) : "";
    return strformat("tensor-parallel rank %d %s (rank %d of %d lost its connection to it)", peer,
                     status.empty() ? "exited or closed its connection" : status.c_str(), o_.rank,
                     o_.world);
  }

  // Waits until the socket to `peer` is ready for `events` (bounded by the timeout).
  void wait(int peer, short events) {
    pollfd p{fd(peer), events, 0};
    const int ms = static_cast<int>(o_.timeout_s * 1000);
    for (;;) {
      const int r = ::poll(&p, 1, ms);
      if (r < 0 && errno == EINTR) continue;
      LANTERN_CHECK(r != 0,
                    "tensor-parallel rank %d did not answer rank %d for %.0f s (hung?); "
                    "raise LANTERN_TP_TIMEOUT_S if a step legitimately takes longer",
                    peer, o_.rank, o_.timeout_s);
      LANTERN_CHECK(r > 0, "poll on the connection to tensor-parallel rank %d failed: %s", peer,
                    std::strerror(errno));
      return;
    }
  }

  void send(int peer, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      wait(peer, POLLOUT);
      const ssize_t w = ::send(fd(peer), p, n, MSG_NOSIGNAL);
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      LANTERN_CHECK(w > 0, "%s", gone(peer).c_str());
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void recv(int peer, void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      wait(peer, POLLIN);
      const ssize_t r = ::recv(fd(peer), p, n, 0);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      LANTERN_CHECK(r > 0, "%s", gone(peer).c_str());
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
};

}  // namespace

std::unique_ptr<Communicator> make_host_comm(HostCommOptions options) {
  return std::make_unique<HostComm>(std::move(options));
}

}  // namespace lantern
