#pragma once
// CUDA / cuBLAS error checks: every call's status is checked; a failure throws
// lantern::Error naming the call, file:line, the error's name and its string.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "engine/common.h"

namespace lantern::cuda_detail {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(strformat("CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(err),
                        cudaGetErrorString(err), call, file, line));
}

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_<unknown>";
  }
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* call, const char* file,
                                      int line) {
  throw Error(strformat("cuBLAS error %s (%s) in %s at %s:%d", cublas_status_name(s),
                        cublasGetStatusString(s), call, file, line));
}

}  // namespace lantern::cuda_detail

// Check a CUDA runtime call.
#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    const cudaError_t lantern_err_ = (call);                                          \
    if (lantern_err_ != cudaSuccess)                                                  \
      ::lantern::cuda_detail::throw_cuda(lantern_err_, #call, __FILE__, __LINE__);    \
  } while (0)

// Check a cuBLAS call.
#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    const cublasStatus_t lantern_st_ = (call);                                        \
    if (lantern_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::lantern::cuda_detail::throw_cublas(lantern_st_, #call, __FILE__, __LINE__);   \
  } while (0)

// Check the last launch (configuration errors, missing kernel image, ...).
// `what` names the kernel launched.
#define CUDA_CHECK_LAST(what)                                                         \
  do {                                                                                \
    const cudaError_t lantern_err_ = cudaGetLastError();                              \
    if (lantern_err_ != cudaSuccess)                                                  \
      ::lantern::cuda_detail::throw_cuda(lantern_err_, "launch of " what, __FILE__,   \
                                         __LINE__);                                   \
  } while (0)
