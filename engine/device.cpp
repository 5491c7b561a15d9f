#include "engine/device.h"

#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include "kernels/base/errors.h"

namespace lantern {

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear sticky-free errors so later calls are not blamed
  LANTERN_FAIL("%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(err), cudaGetErrorString(err),
               file, line);
}

static void check_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  LANTERN_FAIL("%s failed: %s (%s) at %s:%d", call, cublasGetStatusName(st),
               cublasGetStatusString(st), file, line);
}
#define LANTERN_CUBLAS(call) check_cublas((call), #call, __FILE__, __LINE__)

bool Device::cuda_available(std::string* reason) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (reason)
      *reason = err != cudaSuccess ? strformat("%s: %s", cudaGetErrorName(err), cudaGetErrorString(err))
                                   : std::string("no CUDA devices");
    cudaGetLastError();
    return false;
  }
  return true;
}

Device::Device(kernels::Backend backend, Observer* observer) : backend_(backend), observer_(observer) {
  if (!is_cuda()) return;
  std::string reason;
  LANTERN_CHECK(cuda_available(&reason),
                "--device cuda requested but no usable CUDA GPU (%s): use --device cpu",
                reason.c_str());
  LANTERN_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  LANTERN_CUDA(cudaGetDeviceProperties(&prop, 0));
  gpu_.name = prop.name;
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  gpu_.uuid = uuid;
  gpu_.sm_count = prop.multiProcessorCount;
  gpu_.cc_major = prop.major;
  gpu_.cc_minor = prop.minor;
  LANTERN_CUDA(cudaMemGetInfo(&gpu_.free_memory, &gpu_.total_memory));
  LANTERN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LANTERN_CUBLAS(cublasCreate(&cublas_));
  LANTERN_CUBLAS(cublasSetStream(cublas_, stream_));
}

Device::~Device() {
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* Device::alloc(size_t bytes, const char* owner, const char* name) {
  void* p = nullptr;
  if (is_cuda()) {
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      LANTERN_FAIL("cudaMalloc of %zu bytes for %s/%s failed (%s): lower the limits "
                   "(kv_memory_fraction, kv_num_blocks, max_batch_tokens)",
                   bytes, owner, name, cudaGetErrorString(err));
    }
  } else {
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    LANTERN_CHECK(p, "out of host memory allocating %zu bytes for %s/%s", bytes, owner, name);
  }
  AllocEvent e;
  e.owner = owner;
  e.name = name;
  e.address = reinterpret_cast<uint64_t>(p);
  e.bytes = bytes;
  e.backend = backend_;
  LANTERN_OBSERVE(observer_, on_alloc(e));
  return p;
}

void Device::free(void* p, const char* owner, const char* name) {
  if (!p) return;
  if (is_cuda())
    cudaFree(p);
  else
    std::free(p);
  AllocEvent e;
  e.owner = owner;
  e.name = name;
  e.address = reinterpret_cast<uint64_t>(p);
  e.backend = backend_;
  e.is_free = true;
  LANTERN_OBSERVE(observer_, on_alloc(e));
}

void* Device::alloc_pinned(size_t bytes) {
  void* p = nullptr;
  if (is_cuda()) {
    LANTERN_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  } else {
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    LANTERN_CHECK(p, "out of host memory (%zu bytes)", bytes);
  }
  return p;
}

void Device::free_pinned(void* p) {
  if (!p) return;
  if (is_cuda())
    cudaFreeHost(p);
  else
    std::free(p);
}

void Device::copy_h2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    LANTERN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  else
    std::memcpy(dst, src, bytes);
}

void Device::copy_d2h(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    LANTERN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  else
    std::memcpy(dst, src, bytes);
}

void Device::copy_d2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    LANTERN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  else
    std::memmove(dst, src, bytes);
}

void Device::memset(void* dst, int value, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    LANTERN_CUDA(cudaMemsetAsync(dst, value, bytes, stream_));
  else
    std::memset(dst, value, bytes);
}

void Device::synchronize() {
  if (is_cuda()) LANTERN_CUDA(cudaStreamSynchronize(stream_));
}

size_t Device::free_memory() const {
  if (!is_cuda()) return 0;
  size_t free_b = 0, total = 0;
  LANTERN_CUDA(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

void Device::set_cublas_workspace(void* p, size_t bytes) {
  if (is_cuda()) LANTERN_CUBLAS(cublasSetWorkspace(cublas_, p, bytes));
}

kernels::LaunchCtx Device::ctx(void* workspace, size_t workspace_bytes) const {
  kernels::LaunchCtx c;
  c.backend = backend_;
  c.stream = stream_;
  c.cublas = cublas_;
  c.workspace = workspace;
  c.workspace_bytes = workspace_bytes;
  return c;
}

}  // namespace lantern
