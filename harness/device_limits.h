#pragma once
// The SM limits of a CUDA device that bound a kernel's occupancy
// (runfmt/occupancy.h), read through cudaDeviceGetAttribute: the collector
// reads them when CUPTI starts, the session stores them in the manifest
// (gpu.sm_limits) so readers can recompute occupancy without the GPU.
#include "harness/runfmt/occupancy.h"

namespace lantern::harness {

// Throws lantern::Error naming the CUDA call that failed.
runfmt::SmLimits device_sm_limits(int device);

}  // namespace lantern::harness
