// The one test helper that asks the CUDA runtime (kept apart so the CPU-only
// test target links test_util.cpp without CUDA).
#include <cuda_runtime_api.h>

#include "tests/test_util.h"

namespace lantern::test {

bool gpu_available(std::string* reason) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason) *reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (reason) *reason = "cudaGetDeviceCount returned 0 devices";
    return false;
  }
  return true;
}

}  // namespace lantern::test
