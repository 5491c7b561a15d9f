#pragma once
// Roofline probes, measured on the machine of each recorded CUDA run and
// stored in its manifest: device-to-device copy bandwidth (bytes read +
// written per second) and dense bf16 GEMM throughput (cublasGemmEx, fp32
// compute). Achieved rates in kernels.csv are reported against these.
#include <cstdint>

#include <nlohmann/json.hpp>

namespace lantern::harness {

struct RooflineResult {
  double copy_gb_per_s = 0;     // 2 * bytes / time of cudaMemcpyAsync DtoD
  double gemm_tflop_per_s = 0;  // 2 * n^3 / time of one n x n x n bf16 GEMM
  uint64_t copy_bytes = 0;      // size of one copy
  int gemm_n = 0;
  int iterations = 0;
  nlohmann::json to_json() const;
};

// Runs both probes on the current device (about a second). Throws
// lantern::Error naming the failed CUDA / cuBLAS call.
RooflineResult measure_roofline(uint64_t copy_bytes = 1ull << 30, int gemm_n = 8192,
                                int iterations = 20);

}  // namespace lantern::harness
