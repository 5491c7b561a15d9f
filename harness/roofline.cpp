#include "harness/roofline.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"

namespace lantern::harness {

namespace {

// Device buffers, events, stream and handle released on every path.
struct ProbeResources {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  ~ProbeResources() {
    if (cublas) CUBLAS_CHECK_LOG(cublasDestroy(cublas));
    if (start) CUDA_CHECK_LOG(cudaEventDestroy(start));
    if (stop) CUDA_CHECK_LOG(cudaEventDestroy(stop));
    if (stream) CUDA_CHECK_LOG(cudaStreamDestroy(stream));
    CUDA_CHECK_LOG(cudaFree(a));
    CUDA_CHECK_LOG(cudaFree(b));
    CUDA_CHECK_LOG(cudaFree(c));
  }
};

}  // namespace

nlohmann::json RooflineResult::to_json() const {
  return {{"copy_gb_per_s", copy_gb_per_s},
          {"gemm_tflop_per_s", gemm_tflop_per_s},
          {"copy_bytes", copy_bytes},
          {"gemm_n", gemm_n},
          {"iterations", iterations},
          {"method",
           "copy: cudaMemcpyAsync device-to-device, (read + write) bytes / time; gemm: "
           "cublasGemmEx bf16 in/out, fp32 compute, 2 n^3 / time; both averaged over "
           "`iterations` runs after 2 warm-up runs"}};
}

RooflineResult measure_roofline(uint64_t copy_bytes, int gemm_n, int iterations) {
  LANTERN_CHECK(iterations > 0 && gemm_n > 0 && copy_bytes > 0, "roofline probe: bad sizes");
  RooflineResult r;
  r.iterations = iterations;
  r.gemm_n = gemm_n;
  ProbeResources res;
  CUDA_CHECK(cudaStreamCreateWithFlags(&res.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&res.start));
  CUDA_CHECK(cudaEventCreate(&res.stop));

  // Copy bandwidth: shrink the buffers when the device is nearly full (the
  // KV pool takes most of it).
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  while (copy_bytes > (64ull << 20) && 2 * copy_bytes + (256ull << 20) > free_bytes) copy_bytes /= 2;
  r.copy_bytes = copy_bytes;
  CUDA_CHECK(cudaMalloc(&res.a, copy_bytes));
  CUDA_CHECK(cudaMalloc(&res.b, copy_bytes));
  CUDA_CHECK(cudaMemsetAsync(res.a, 0x3c, copy_bytes, res.stream));
  for (int i = 0; i < 2; ++i)
    CUDA_CHECK(cudaMemcpyAsync(res.b, res.a, copy_bytes, cudaMemcpyDeviceToDevice, res.stream));
  CUDA_CHECK(cudaEventRecord(res.start, res.stream));
  for (int i = 0; i < iterations; ++i)
    CUDA_CHECK(cudaMemcpyAsync(res.b, res.a, copy_bytes, cudaMemcpyDeviceToDevice, res.stream));
  CUDA_CHECK(cudaEventRecord(res.stop, res.stream));
  CUDA_CHECK(cudaEventSynchronize(res.stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, res.start, res.stop));
  LANTERN_CHECK(ms > 0, "roofline probe: copy timing came back as %f ms", ms);
  r.copy_gb_per_s = 2.0 * static_cast<double>(copy_bytes) * iterations / (ms * 1e-3) / 1e9;
  CUDA_CHECK(cudaFree(res.a));
  res.a = nullptr;
  CUDA_CHECK(cudaFree(res.b));
  res.b = nullptr;

  // GEMM throughput: n x n x n, bf16 in and out, fp32 accumulate.
  const size_t matrix = static_cast<size_t>(gemm_n) * gemm_n * 2;
  CUDA_CHECK(cudaMalloc(&res.a, matrix));
  CUDA_CHECK(cudaMalloc(&res.b, matrix));
  CUDA_CHECK(cudaMalloc(&res.c, matrix));
  // 0x3c3c is bf16 ~0.0115: non-zero data, so the probe draws real power.
  CUDA_CHECK(cudaMemsetAsync(res.a, 0x3c, matrix, res.stream));
  CUDA_CHECK(cudaMemsetAsync(res.b, 0x3c, matrix, res.stream));
  CUBLAS_CHECK(cublasCreate(&res.cublas));
  CUBLAS_CHECK(cublasSetStream(res.cublas, res.stream));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    CUBLAS_CHECK(cublasGemmEx(res.cublas, CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n,
                                      &alpha, res.a, CUDA_R_16BF, gemm_n, res.b, CUDA_R_16BF,
                                      gemm_n, &beta, res.c, CUDA_R_16BF, gemm_n,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 2; ++i) gemm();
  CUDA_CHECK(cudaEventRecord(res.start, res.stream));
  for (int i = 0; i < iterations; ++i) gemm();
  CUDA_CHECK(cudaEventRecord(res.stop, res.stream));
  CUDA_CHECK(cudaEventSynchronize(res.stop));
  CUDA_CHECK(cudaEventElapsedTime(&ms, res.start, res.stop));
  LANTERN_CHECK(ms > 0, "roofline probe: GEMM timing came back as %f ms", ms);
  r.gemm_tflop_per_s = 2.0 * gemm_n * static_cast<double>(gemm_n) * gemm_n * iterations /
                       (ms * 1e-3) / 1e12;
  return r;
}

}  // namespace lantern::harness
