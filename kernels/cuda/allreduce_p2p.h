#pragma once
// One-shot all-reduce over peer-to-peer loads (NVLink), for the small
// messages of tensor-parallel decode (batch x hidden bf16: 8 KB at batch 1 of
// Llama-3.1-8B), where NCCL's ring/tree costs ~6 us of latency per call and
// its kernel breaks the programmatic-dependent-launch chain of the GEMVs.
//
// Each rank owns one IPC-exported allocation (P2pAllReduceBuffers): two data
// halves of kP2pMaxBytes (alternated per call, so no barrier is needed at the
// end of a call) and a flag array [kP2pMaxBlocks][kP2pMaxRanks]. A call with
// `bytes` runs ceil(bytes / kP2pChunk) blocks; block b owns the fixed byte
// range [b*kP2pChunk, (b+1)*kP2pChunk) of every call, so its flags and data
// region are the same call after call and its epoch (calls that used block b)
// is the same number on every rank:
//   1. copy this rank's chunk of `buf` into its own data half (epoch parity);
//   2. store the epoch into flag [b][rank] of every rank's allocation
//      (release, system scope), then wait until its own flags [b][q] reach the
//      epoch for every peer q (acquire);
//   3. sum the chunk of every rank in rank order 0..N-1 (fp32, so every rank
//      computes bit-identical sums) and write it to `buf`.
// Reusing a data half two calls later is safe: a peer's flag for the next
// call is only written after that peer's kernel for this call completed.
// NCCL_NVLS_ENABLE / multicast play no part: plain IPC mappings and P2P loads.
#include <cstddef>
#include <cstdint>

#include "kernels/registry.h"  // cudaStream_t

namespace lantern::kernels {

constexpr int kP2pMaxRanks = 8;
constexpr size_t kP2pChunk = 8192;   // bytes per block
constexpr int kP2pMaxBlocks = 512;   // so messages up to 4 MiB
constexpr size_t kP2pMaxBytes = kP2pChunk * kP2pMaxBlocks;

// Layout of one rank's exported allocation.
constexpr size_t kP2pFlagsOffset = 2 * kP2pMaxBytes;
constexpr size_t kP2pAllocBytes = kP2pFlagsOffset + sizeof(uint32_t) * kP2pMaxBlocks * kP2pMaxRanks;

struct P2pAllReduceBuffers {
  void* peer_base[kP2pMaxRanks] = {};  // every rank's allocation, mapped here (own one included)
  uint32_t* epochs = nullptr;          // this rank only: [kP2pMaxBlocks], zeroed at setup
  int rank = 0, world = 1;
};

// Whether a message of `bytes` (a multiple of 16) goes through the P2P path.
inline bool p2p_all_reduce_fits(size_t bytes) {
  return bytes > 0 && bytes <= kP2pMaxBytes && bytes % 16 == 0;
}

// buf[0..count) (bf16 when `bf16`, else f32; 16-byte aligned) = sum over
// ranks, in place, on `stream` (capturable). Launched with programmatic
// dependent launch: it waits for the previous kernel before touching buf and
// lets the next one start loading its weights at once.
void p2p_all_reduce(const P2pAllReduceBuffers& b, void* buf, size_t count, bool bf16, cudaStream_t stream);

}  // namespace lantern::kernels
