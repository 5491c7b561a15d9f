#include "kernels/base/cuda_check.h"

#include <cstdio>

namespace lantern {

std::string cuda_error_message(cudaError_t err, const char* call, const char* file, int line,
                               const std::string& hint) {
  std::string msg = strformat("%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(err),
                              cudaGetErrorString(err), file, line);
  return hint.empty() ? msg : msg + ": " + hint;
}

std::string cublas_error_message(cublasStatus_t status, const char* call, const char* file,
                                 int line) {
  return strformat("%s failed: %s (%s) at %s:%d", call, cublasGetStatusName(status),
                   cublasGetStatusString(status), file, line);
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                      const std::string& hint) {
  (void)cudaGetLastError();
  throw Error(cuda_error_message(err, call, file, line, hint));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(cublas_error_message(status, call, file, line));
}

void log_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  std::fprintf(stderr, "lantern: warning: %s\n", cuda_error_message(err, call, file, line).c_str());
}

void log_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::fprintf(stderr, "lantern: warning: %s\n",
               cublas_error_message(status, call, file, line).c_str());
}

}  // namespace lantern
