#pragma once
// What the grid-wide samplers (sample.6 grid_gather, sample.7 grid_race) share:
// the row barrier between the blocks of one row (every block resident at once:
// a cooperative launch) and the per-stream sets of their static row state.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/base/cuda_check.h"

namespace lantern::kernels::sample_grid {

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block of the row arrives; each waits until `target` arrivals (the
// counter only grows within a launch: G per barrier). The fence before the
// arrival publishes the block's global writes (those of every thread: the
// __syncthreads orders them before thread 0's cumulative fence); the acquire
// load orders the reads after it (read the peers' data with __ldcg: L1 may hold
// stale lines).
__device__ __forceinline__ void row_barrier(unsigned int* bar, unsigned int target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(bar, 1u);
    while (load_acquire(bar) < target) {
    }
  }
  __syncthreads();
}

// The set of a sampler's static row state for launches on `stream`: `symbol` is
// a __device__ array of kSlots sets of kPerSlot entries. Per device, the last
// kSlots streams seen keep their sets; a new stream takes the least recently
// used (two engines in one process run on different streams).
template <int kSlots, int kPerSlot, class T>
T* stream_slot(cudaStream_t stream, T (&symbol)[kSlots * kPerSlot]) {
  struct Slots {
    T* base = nullptr;
    cudaStream_t owner[kSlots] = {};
    uint64_t used[kSlots] = {};
    uint64_t clock = 0;
  };
  static std::mutex mu;
  static std::map<int, Slots> per_device;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  Slots& d = per_device[dev];
  if (!d.base) CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&d.base), symbol));
  int pick = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (d.owner[i] == stream && d.used[i]) {
      pick = i;
      break;
    }
    if (d.used[i] < d.used[pick]) pick = i;
  }
  d.owner[pick] = stream;
  d.used[pick] = ++d.clock;
  return d.base + size_t(pick) * kPerSlot;
}

// A row sampler's launch configuration: grid (blocks, rows) of `threads`,
// `smem` bytes of dynamic shared memory, and, when `cooperative`, the
// cooperative attribute -- the driver then refuses a grid whose blocks cannot
// all be resident at once (a shared GPU, MPS limits) instead of letting the row
// barriers spin forever. Pinned in place: cfg points at attr.
// `pdl`: also programmatic dependent launch (the kernel calls
// griddepcontrol.wait before it reads what the previous kernel writes).
struct GridLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2] = {};
  GridLaunch(int blocks, int rows, int threads, size_t smem, cudaStream_t stream, bool cooperative,
             bool pdl = false) {
    cfg.gridDim = dim3(unsigned(blocks), unsigned(rows));
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    unsigned n = 0;
    if (cooperative) {
      attr[n].id = cudaLaunchAttributeCooperative;
      attr[n++].val.cooperative = 1;
    }
    if (pdl) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.attrs = n ? attr : nullptr;
    cfg.numAttrs = n;
  }
  GridLaunch(const GridLaunch&) = delete;
  GridLaunch& operator=(const GridLaunch&) = delete;
};

// Raises `kernel`'s dynamic shared-memory limit to `smem` the first time a
// launch needs it (*allowed: the caller's record of what is set).
template <class Kernel>
void allow_smem(Kernel kernel, size_t smem, size_t* allowed) {
  if (smem <= *allowed) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  *allowed = smem;
}

}  // namespace lantern::kernels::sample_grid
