#include "harness/device_limits.h"

#include <cuda_runtime_api.h>

#include "kernels/base/cuda_check.h"

namespace lantern::harness {

runfmt::SmLimits device_sm_limits(int device) {
  auto attr = [device](cudaDeviceAttr a) {
    int v = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
    return v;
  };
  runfmt::SmLimits sm;
  sm.compute_major = attr(cudaDevAttrComputeCapabilityMajor);
  sm.compute_minor = attr(cudaDevAttrComputeCapabilityMinor);
  sm.sm_count = attr(cudaDevAttrMultiProcessorCount);
  sm.warp_size = attr(cudaDevAttrWarpSize);
  sm.max_threads_per_sm = attr(cudaDevAttrMaxThreadsPerMultiProcessor);
  sm.max_threads_per_block = attr(cudaDevAttrMaxThreadsPerBlock);
  sm.max_blocks_per_sm = attr(cudaDevAttrMaxBlocksPerMultiprocessor);
  sm.regs_per_sm = attr(cudaDevAttrMaxRegistersPerMultiprocessor);
  sm.regs_per_block = attr(cudaDevAttrMaxRegistersPerBlock);
  sm.smem_per_sm = attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  sm.smem_reserved_per_block = attr(cudaDevAttrReservedSharedMemoryPerBlock);
  runfmt::set_allocation_units(sm);
  return sm;
}

}  // namespace lantern::harness
