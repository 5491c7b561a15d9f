// One-shot P2P all-reduce (kernels/cuda/allreduce_p2p.h has the protocol).
#include "kernels/base/errors.h"
#include "kernels/cuda/allreduce_p2p.h"
#include "kernels/cuda/cuda_common.cuh"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kP2pThreads = 256;  // 8 KB chunk: two 16-byte vectors per thread

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_vec(float (&acc)[8], const uint4& v, bool bf16) {
  if (bf16) {
    float f[8];
    unpack8(v, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += f[i];
  } else {  // 4 floats in the low half of acc
    acc[0] += __uint_as_float(v.x), acc[1] += __uint_as_float(v.y);
    acc[2] += __uint_as_float(v.z), acc[3] += __uint_as_float(v.w);
  }
}

__device__ __forceinline__ uint4 pack_vec(const float (&acc)[8], bool bf16) {
  if (bf16) return pack8(acc);
  return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                    __float_as_uint(acc[3]));
}

__global__ void __launch_bounds__(kP2pThreads) p2p_all_reduce_kernel(P2pAllReduceBuffers b, char* buf,
                                                                     size_t bytes, bool bf16) {
  const int blk = blockIdx.x, tid = threadIdx.x;
  const size_t off = size_t(blk) * kP2pChunk;
  const size_t len = min(kP2pChunk, bytes - off);
  __shared__ uint32_t epoch_s;
  // buf is written by the previous kernel (o_proj / down_proj), and the
  // previous call's epochs are only certain to be stored once every kernel
  // before this one has completed.
  grid_dependency_wait();
  trigger_dependents();  // the next kernel may start loading its weights meanwhile
  if (tid == 0) epoch_s = b.epochs[blk] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  const size_t half = size_t(epoch & 1) * kP2pMaxBytes;

  // 1. This rank's chunk into its exported half.
  char* mine = static_cast<char*>(b.peer_base[b.rank]) + half + off;
  for (size_t i = size_t(tid) * 16; i < len; i += kP2pThreads * 16)
    *reinterpret_cast<uint4*>(mine + i) = *reinterpret_cast<const uint4*>(buf + off + i);
  __syncthreads();
  // 2. Arrive at every rank (the fence orders the whole block's copy, seen
  //    through the barrier, before the flag), then wait for every peer.
  if (tid < b.world) {
    __threadfence_system();
    auto* flags = reinterpret_cast<uint32_t*>(static_cast<char*>(b.peer_base[tid]) + kP2pFlagsOffset);
    store_release_sys(flags + blk * kP2pMaxRanks + b.rank, epoch);
    const auto* own = reinterpret_cast<const uint32_t*>(static_cast<char*>(b.peer_base[b.rank]) + kP2pFlagsOffset);
    while (load_acquire_sys(own + blk * kP2pMaxRanks + tid) < epoch) {
    }
  }
  __syncthreads();
  // 3. Sum in rank order (identical on every rank), write back.
  for (size_t i = size_t(tid) * 16; i < len; i += kP2pThreads * 16) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint4 v[kP2pMaxRanks];
#pragma unroll
    for (int q = 0; q < kP2pMaxRanks; ++q)
      if (q < b.world) v[q] = __ldcg(reinterpret_cast<const uint4*>(static_cast<const char*>(b.peer_base[q]) + half + off + i));
#pragma unroll
    for (int q = 0; q < kP2pMaxRanks; ++q)
      if (q < b.world) add_vec(acc, v[q], bf16);
    *reinterpret_cast<uint4*>(buf + off + i) = pack_vec(acc, bf16);
  }
  if (tid == 0) b.epochs[blk] = epoch;
}

}  // namespace

void p2p_all_reduce(const P2pAllReduceBuffers& b, void* buf, size_t count, bool bf16, cudaStream_t stream) {
  const size_t bytes = count * (bf16 ? 2 : 4);
  LANTERN_CHECK(p2p_all_reduce_fits(bytes) && aligned(buf, 16),
                "p2p_all_reduce: %zu bytes at %p (needs a multiple of 16 up to %zu, 16-byte aligned)", bytes, buf,
                kP2pMaxBytes);
  LANTERN_CHECK(b.world >= 2 && b.world <= kP2pMaxRanks && b.rank >= 0 && b.rank < b.world,
                "p2p_all_reduce: rank %d of %d (2..%d ranks)", b.rank, b.world, kP2pMaxRanks);
  const unsigned blocks = unsigned((bytes + kP2pChunk - 1) / kP2pChunk);
  launch_kernel(/*pdl=*/true, p2p_all_reduce_kernel, dim3(blocks), dim3(kP2pThreads), 0, stream, b,
                static_cast<char*>(buf), bytes, bf16);
  CUDA_CHECK_LAST("p2p_all_reduce_kernel");
}

}  // namespace lantern::kernels
