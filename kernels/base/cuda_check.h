#pragma once
// The one CUDA / cuBLAS error check of Lantern (the CUDA part of the base
// layer; errors.h and bf16.h are the CUDA-free part).
//
//   CUDA_CHECK(call)        a runtime call; throws lantern::Error
//   CUDA_CHECK_HINT(call, fmt, ...)  the same, the message ending in what to do
//   CUBLAS_CHECK(call)      a cuBLAS call; throws lantern::Error
//   CUDA_CHECK_LAST(what)   the last kernel launch (cudaGetLastError); throws
//   CUDA_CHECK_LOG(call)    a runtime call in a destructor or cleanup path: logs
//   CUBLAS_CHECK_LOG(call)  a cuBLAS call there: logs (a destructor must not throw)
//
// Every message has one shape (CUPTI's LANTERN_CUPTI in harness/ keeps it too):
//   <call> failed: <error name> (<error string>) at <file>:<line>[: <hint>]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/base/errors.h"

namespace lantern {

std::string cuda_error_message(cudaError_t err, const char* call, const char* file, int line,
                               const std::string& hint = {});
std::string cublas_error_message(cublasStatus_t status, const char* call, const char* file,
                                 int line);

// Clear the runtime's last (non-sticky) error so a later launch check is not
// blamed for this one, then throw the message above.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                                   const std::string& hint = {});
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

// The same message on stderr as "lantern: warning: ..." (cleanup paths).
void log_cuda_error(cudaError_t err, const char* call, const char* file, int line);
void log_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace lantern

#define CUDA_CHECK(call)                                                        \
  do {                                                                          \
    const cudaError_t lantern_err_ = (call);                                    \
    if (lantern_err_ != cudaSuccess)                                            \
      ::lantern::throw_cuda_error(lantern_err_, #call, __FILE__, __LINE__);     \
  } while (0)

#define CUDA_CHECK_HINT(call, ...)                                              \
  do {                                                                          \
    const cudaError_t lantern_err_ = (call);                                    \
    if (lantern_err_ != cudaSuccess)                                            \
      ::lantern::throw_cuda_error(lantern_err_, #call, __FILE__, __LINE__,      \
                                  ::lantern::strformat(__VA_ARGS__));           \
  } while (0)

#define CUBLAS_CHECK(call)                                                      \
  do {                                                                          \
    const cublasStatus_t lantern_st_ = (call);                                  \
    if (lantern_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::lantern::throw_cublas_error(lantern_st_, #call, __FILE__, __LINE__);    \
  } while (0)

// `what` names the kernel launched (a string literal).
#define CUDA_CHECK_LAST(what)                                                   \
  do {                                                                          \
    const cudaError_t lantern_err_ = cudaGetLastError();                        \
    if (lantern_err_ != cudaSuccess)                                            \
      ::lantern::throw_cuda_error(lantern_err_, "launch of " what, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_LOG(call)                                                    \
  do {                                                                          \
    const cudaError_t lantern_err_ = (call);                                    \
    if (lantern_err_ != cudaSuccess)                                            \
      ::lantern::log_cuda_error(lantern_err_, #call, __FILE__, __LINE__);       \
  } while (0)

#define CUBLAS_CHECK_LOG(call)                                                  \
  do {                                                                          \
    const cublasStatus_t lantern_st_ = (call);                                  \
    if (lantern_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::lantern::log_cublas_error(lantern_st_, #call, __FILE__, __LINE__);      \
  } while (0)
