#pragma once
// What the grid-wide samplers (sample.6 grid_gather, sample.7 grid_race) share:
// the row barrier between the blocks of one row (every block resident at once:
// a cooperative launch) and their launch configuration. Their per-stream
// sets of static row state: stream_slot.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/base/cuda_check.h"
#include "kernels/cuda/stream_slot.h"

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

}  // namespace lantern::kernels::sample_grid
