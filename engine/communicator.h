#pragma once
// Communicator: what the ranks of a tensor-parallel group say to each other.
// The forward pass needs one collective (all_reduce, a sum in place on an
// activation buffer, after o_proj and down_proj), and a second with a split
// LM head (all_gather of the ranks' logits parts); the engine needs the step
// plan broadcast from rank 0, a barrier, and abort for a failed peer.
//
// Implementations:
//   LocalGroup (communicator_local.cpp)   simulated ranks: threads of one process, CPU
//   HostComm   (communicator_host.cpp)    one process per rank on the CPU backend:
//                                          socketpairs to rank 0 (star), sums on rank 0
//   NcclComm   (communicator_nccl.cpp)    one process per GPU: ncclAllReduce on the
//                                          engine's stream; plan and barrier over HostComm
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/registry.h"  // cudaStream_t forward declaration

namespace lantern {

// Element type of a collective's buffer: activations are f32 on the CPU
// backend, bf16 on CUDA; logits are f32 on both.
enum class ReduceType : uint8_t { f32, bf16 };
size_t reduce_type_bytes(ReduceType t);

// Which implementation NcclComm's all_reduce uses (--tp-allreduce, else
// LANTERN_TP_ALLREDUCE, else auto): `automatic` the one-shot P2P kernel for
// messages up to 4 MiB when every rank mapped its peers, NCCL above; `nccl`
// always NCCL; `p2p` as auto but an error when the peers cannot be mapped.
// The CPU communicators have one path and only record the choice.
enum class TpAllReduce : uint8_t { automatic, nccl, p2p };
const char* tp_all_reduce_name(TpAllReduce p);  // "auto", "nccl", "p2p"
// Throws one line naming the valid values; `from_env`: the value came from
// LANTERN_TP_ALLREDUCE (the message names it instead of --tp-allreduce).
TpAllReduce parse_tp_all_reduce(const std::string& s, bool from_env = false);
// LANTERN_TP_ALLREDUCE when set, else automatic (what every rank reads from
// the launcher's environment when no --tp-allreduce is given).
TpAllReduce tp_all_reduce_from_env();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual const char* kind() const = 0;  // "local", "host", "nccl"

  // buf[0..count) = sum over ranks of every rank's buf, in place. CPU
  // communicators run it synchronously; NCCL enqueues it on `stream` (the
  // engine's stream, so it orders with the kernels around it and can be
  // captured into a CUDA graph). Throws naming the failed peer.
  virtual void all_reduce(void* buf, size_t count, ReduceType type, cudaStream_t stream) = 0;
  // recv[r * count .. (r + 1) * count) = rank r's send[0..count), on every
  // rank (rank-major, as ncclAllGather). send and recv do not overlap. Same
  // stream and failure rules as all_reduce.
  virtual void all_gather(const void* send, void* recv, size_t count, ReduceType type,
                          cudaStream_t stream) = 0;
  // The all_reduce implementations this communicator can use ("nccl", "p2p",
  // ...; the first is the default's fallback) and a choice among them or
  // "auto" (commbench measures each; every rank must make the same choice).
  virtual std::vector<std::string> all_reduce_paths() const { return {kind()}; }
  // What all_reduce runs now, for the manifest (config.tensor_parallel.all_reduce):
  // e.g. "p2p up to 4194304 bytes, nccl above", "nccl", "host".
  virtual std::string all_reduce_desc() const { return kind(); }
  virtual void use_all_reduce_path(const std::string& path) {
    LANTERN_CHECK(path == kind() || path == "auto", "all_reduce path '%s': this %s communicator has only '%s'",
                  path.c_str(), kind(), kind());
  }
  // Rank 0's `bytes` to every rank (others: replaced by rank 0's).
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  virtual void barrier() = 0;
  // The minimum of every rank's `value`, on every rank (host side; e.g. the
  // KV blocks every rank's pool can hold).
  virtual int64_t all_min(int64_t value) = 0;
  // Tears the group down after a failure so no peer waits forever; `why` is
  // reported by the peers. Safe to call from another thread.
  virtual void abort(const std::string& why) = 0;
  // Without blocking: why a peer is gone (its connection closed), or "" when
  // all look alive. Used by watchdogs while a rank waits inside a GPU
  // collective; communicators without connections return "".
  virtual std::string poll_peers() { return ""; }
};

// Simulated ranks on one process (the CPU oracle of tensor parallelism): one
// group, one Communicator per rank, each used by its own thread.
std::vector<std::unique_ptr<Communicator>> make_local_group(int world);

}  // namespace lantern

namespace lantern {

// One process per rank, on one host: rank 0 holds a connected stream socket
// to every other rank (fds[r], r >= 1; fds[0] unused), a rank > 0 one socket
// to rank 0 (fds[0]). Rank 0 sums all_reduce buffers (f32) in rank order and
// sends the result back; broadcast and barrier go through it as well. A peer
// that exits closes its socket, so a waiting rank fails at once with
// `peer_status(r)` (e.g. "killed by signal 9") in its error; a peer that
// stops answering fails it after `timeout_s`.
struct HostCommOptions {
  int rank = 0, world = 1;
  std::vector<int> fds;                              // owned (closed by the communicator)
  std::function<std::string(int rank)> peer_status;  // may be empty
  double timeout_s = 600;
};
std::unique_ptr<Communicator> make_host_comm(HostCommOptions options);

// NCCL: `host` (a HostComm of the same group) carries the ncclUniqueId from
// rank 0, the step plans and barriers; all_reduce is ncclAllReduce (bf16 or
// f32, sum, in place) on the engine's stream, or the P2P kernel as `path`
// says (every rank must pass the same). GPU `gpu` must be current. A
// watchdog thread turns a dead peer (its socket closed) or an NCCL async
// error into ncclCommAbort and exit(1) with the reason, so no rank waits
// forever in a collective. Throws naming the missing NCCL when built without.
std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int gpu,
                                             TpAllReduce path = tp_all_reduce_from_env());
// Whether this build has NCCL (LANTERN_HAVE_NCCL).
bool nccl_available();

}  // namespace lantern
