// The one CUDA / cuBLAS check: message shape, throw vs log. Runs on the CPU:
// error codes need no GPU, and cudart / cuBLAS name them without a driver.
#include "kernels/base/cuda_check.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

namespace lantern {
namespace {

cudaError_t returns(cudaError_t e) { return e; }
cublasStatus_t returns_status(cublasStatus_t s) { return s; }

std::string thrown_by(void (*f)()) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

TEST(CudaCheck, MessageNamesCallErrorNameStringAndPlace) {
  EXPECT_EQ(cuda_error_message(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "engine/x.cpp", 42),
            "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory) at engine/x.cpp:42");
  EXPECT_EQ(cuda_error_message(cudaErrorInvalidValue, "f()", "a.cu", 7, "lower the limits"),
            "f() failed: cudaErrorInvalidValue (invalid argument) at a.cu:7: lower the limits");
}

TEST(CudaCheck, CublasMessageUsesTheLibrarysNameAndString) {
  const std::string m =
      cublas_error_message(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate(&h)", "d.cpp", 3);
  const std::string text = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_FALSE(text.empty());
  EXPECT_NE(text, "CUBLAS_STATUS_NOT_INITIALIZED");  // a description, not the name again
  EXPECT_EQ(m, "cublasCreate(&h) failed: CUBLAS_STATUS_NOT_INITIALIZED (" + text + ") at d.cpp:3");
}

TEST(CudaCheck, MacrosThrowWithTheCallTextAndThisLine) {
  static int line = 0;
  const std::string cuda = thrown_by([] {
    line = __LINE__ + 1;
    CUDA_CHECK(returns(cudaErrorInvalidDevice));
  });
  EXPECT_EQ(cuda, "returns(cudaErrorInvalidDevice) failed: cudaErrorInvalidDevice (" +
                      std::string(cudaGetErrorString(cudaErrorInvalidDevice)) + ") at " +
                      __FILE__ + ":" + std::to_string(line));
  const std::string cublas = thrown_by([] { CUBLAS_CHECK(returns_status(CUBLAS_STATUS_INVALID_VALUE)); });
  EXPECT_EQ(cublas.rfind("returns_status(CUBLAS_STATUS_INVALID_VALUE) failed: "
                         "CUBLAS_STATUS_INVALID_VALUE (",
                         0),
            0u)
      << cublas;
  const std::string hinted = thrown_by(
      [] { CUDA_CHECK_HINT(returns(cudaErrorMemoryAllocation), "need %d more blocks", 3); });
  EXPECT_NE(hinted.find("cudaErrorMemoryAllocation (out of memory) at "), std::string::npos);
  const std::string hint = ": need 3 more blocks";
  ASSERT_GT(hinted.size(), hint.size());
  EXPECT_EQ(hinted.substr(hinted.size() - hint.size()), hint);
}

TEST(CudaCheck, SuccessDoesNothing) {
  EXPECT_NO_THROW(CUDA_CHECK(returns(cudaSuccess)));
  EXPECT_NO_THROW(CUBLAS_CHECK(returns_status(CUBLAS_STATUS_SUCCESS)));
  testing::internal::CaptureStderr();
  CUDA_CHECK_LOG(returns(cudaSuccess));
  CUBLAS_CHECK_LOG(returns_status(CUBLAS_STATUS_SUCCESS));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(CudaCheck, LogFormsWarnOnStderrAndDoNotThrow) {
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(CUDA_CHECK_LOG(returns(cudaErrorInvalidResourceHandle)));
  EXPECT_NO_THROW(CUBLAS_CHECK_LOG(returns_status(CUBLAS_STATUS_EXECUTION_FAILED)));
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string first = "lantern: warning: returns(cudaErrorInvalidResourceHandle) failed: "
                            "cudaErrorInvalidResourceHandle (";
  EXPECT_EQ(err.rfind(first, 0), 0u) << err;
  EXPECT_NE(err.find("\nlantern: warning: returns_status(CUBLAS_STATUS_EXECUTION_FAILED) failed: "
                     "CUBLAS_STATUS_EXECUTION_FAILED ("),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << "one line per failure";
}

}  // namespace
}  // namespace lantern
