#pragma once
// Attribution: kernel rows for kernels.csv, each tied to its step, layer, op,
// family and variant, with achieved rates against the roofline.
//
// GPU kernels (CUPTI) find their op through the external correlation id the
// collector pushed in on_op_begin, or, when launched from a CUDA graph,
// through the graph node the op created while the graph was captured; their
// step comes from the step id pushed around the launching call. A replay
// whose node ids were never seen at capture (CUPTI detached and re-attached
// in between: windows) is labelled by position: a decode graph is one
// stream's capture, a chain, so its i-th kernel (by start time) is the i-th
// kernel of a labelled replay of the same graph slot (Timeline::replays()),
// or, without one, the kernel of the captured op whose kernel-node count
// (OpInfo::graph_kernels, counted by the engine at capture) covers i.
// An op's
// registry bytes/FLOPs are split over its kernels in proportion to duration.
#include <cstdint>
#include <optional>
#include <vector>

#include "harness/gpu_records.h"
#include "harness/runfmt/records.h"
#include "harness/timeline.h"

namespace lantern::harness {

struct Roofline {
  std::optional<double> copy_gb_per_s;     // device memory bandwidth (read + write)
  std::optional<double> gemm_tflop_per_s;  // dense bf16 GEMM throughput
};

struct AttributionStats {
  int64_t kernels = 0;
  int64_t unattributed = 0;  // kernels with no op (launched outside op hooks)
  int64_t by_position = 0;   // graph kernels labelled by position from a labelled replay
  int64_t by_capture = 0;    // graph kernels labelled by position from the capture's node counts
};

// CUPTI kernels -> rows (memcpy/memset records are not kernels and are skipped).
std::vector<runfmt::KernelRow> attribute_gpu_kernels(const GpuRecords& gpu, const Timeline& timeline,
                                                     const Roofline& roofline, uint64_t origin_ns,
                                                     AttributionStats* stats = nullptr);

// Host-timed ops -> rows (the CPU backend: each op is its own "kernel").
std::vector<runfmt::KernelRow> host_kernel_rows(const Timeline& timeline, const Roofline& roofline,
                                                uint64_t origin_ns);

}  // namespace lantern::harness
