#include "engine/device.h"

#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"

namespace lantern {

bool Device::cuda_available(std::string* reason) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (reason)
      *reason = err != cudaSuccess ? strformat("%s: %s", cudaGetErrorName(err), cudaGetErrorString(err))
                                   : std::string("no CUDA devices");
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

void Device::select_gpu(int index) {
  std::string reason;
  LANTERN_CHECK(cuda_available(&reason),
                "--device cuda requested but no usable CUDA GPU (%s): use --device cpu",
                reason.c_str());
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  LANTERN_CHECK(index >= 0 && index < count,
                "--gpu %d: no such GPU (%d visible, numbered 0..%d): pick one of them "
                "(CUDA_VISIBLE_DEVICES renumbers them)",
                index, count, count - 1);
  CUDA_CHECK(cudaSetDevice(index));
}

Device::Device(kernels::Backend backend, Observer* observer, int gpu)
    : backend_(backend), observer_(observer) {
  if (!is_cuda()) return;
  select_gpu(gpu);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
  gpu_.device = gpu;
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
  CUDA_CHECK(cudaMemGetInfo(&gpu_.free_memory, &gpu_.total_memory));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
}

Device::~Device() {
  if (cublas_) CUBLAS_CHECK_LOG(cublasDestroy(cublas_));
  if (stream_) CUDA_CHECK_LOG(cudaStreamDestroy(stream_));
}

void* Device::alloc(size_t bytes, const char* owner, const char* name) {
  void* p = nullptr;
  if (is_cuda()) {
    CUDA_CHECK_HINT(cudaMalloc(&p, bytes),
                    "allocating %zu bytes for %s/%s: lower the limits "
                    "(kv_memory_fraction, kv_num_blocks, max_batch_tokens)",
                    bytes, owner, name);
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
    CUDA_CHECK_LOG(cudaFree(p));
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
    CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  } else {
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    LANTERN_CHECK(p, "out of host memory (%zu bytes)", bytes);
  }
  return p;
}

void Device::free_pinned(void* p) {
  if (!p) return;
  if (is_cuda())
    CUDA_CHECK_LOG(cudaFreeHost(p));
  else
    std::free(p);
}

void Device::copy_h2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  else
    std::memcpy(dst, src, bytes);
}

void Device::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                     size_t height) {
  if (!width || !height) return;
  if (is_cuda()) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                 cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  for (size_t row = 0; row < height; ++row)
    std::memcpy(static_cast<char*>(dst) + row * dst_pitch,
                static_cast<const char*>(src) + row * src_pitch, width);
}

void Device::copy_d2h(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  else
    std::memcpy(dst, src, bytes);
}

void Device::memset(void* dst, int value, size_t bytes) {
  if (!bytes) return;
  if (is_cuda())
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  else
    std::memset(dst, value, bytes);
}

void Device::synchronize() {
  if (is_cuda()) CUDA_CHECK(cudaStreamSynchronize(stream_));
}

size_t Device::free_memory() const {
  if (!is_cuda()) return 0;
  size_t free_b = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

void Device::set_cublas_workspace(void* p, size_t bytes) {
  if (is_cuda()) CUBLAS_CHECK(cublasSetWorkspace(cublas_, p, bytes));
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
