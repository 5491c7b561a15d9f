#pragma once
// Device: the one place the engine touches the CUDA runtime and cuBLAS
// handles (the scheduler and kv bookkeeping never do). On the CPU backend the
// same calls are plain host memory operations, so the engine code above it is
// backend-agnostic.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/observer.h"
#include "kernels/registry.h"

namespace lantern {

struct GpuInfo {
  std::string name, uuid;
  int device = 0, sm_count = 0, cc_major = 0, cc_minor = 0;
  size_t total_memory = 0, free_memory = 0;
};

class Device {
 public:
  // cuda: makes GPU `gpu` current (select_gpu) and creates the stream and the
  // cuBLAS handle on it. cpu: `gpu` is ignored. The current device is a
  // per-thread setting: another thread that launches on this device's stream
  // must call select_gpu(gpu().device) first.
  explicit Device(kernels::Backend backend, Observer* observer = nullptr, int gpu = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  kernels::Backend backend() const { return backend_; }
  bool is_cuda() const { return backend_ == kernels::Backend::cuda; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  const GpuInfo& gpu() const { return gpu_; }

  // Tracked allocations (reported to the observer's memory map). alloc throws
  // (with the limits to lower); the frees only log a failure, since they run
  // in destructors.
  void* alloc(size_t bytes, const char* owner, const char* name);
  void free(void* p, const char* owner, const char* name);
  void* alloc_pinned(size_t bytes);  // host staging (pinned on cuda)
  void free_pinned(void* p);

  void copy_h2d(void* dst, const void* src, size_t bytes);  // async on the stream
  void copy_d2h(void* dst, const void* src, size_t bytes);  // async on the stream
  // `height` rows of `width` bytes, device to device (host memory on the
  // CPU), async on the stream; capturable into a CUDA graph.
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t height);
  void memset(void* dst, int value, size_t bytes);
  void synchronize();
  size_t free_memory() const;  // cuda: cudaMemGetInfo free bytes; cpu: 0

  // cuBLAS workspace (set once so graph capture never allocates).
  void set_cublas_workspace(void* p, size_t bytes);
  kernels::LaunchCtx ctx(void* workspace, size_t workspace_bytes) const;

  // Whether a usable CUDA GPU is present; if not, `reason` says why.
  static bool cuda_available(std::string* reason = nullptr);
  // Makes GPU `index` current for the calling thread; a one-line error when no
  // GPU is usable or `index` is not one of them (--gpu N).
  static void select_gpu(int index);

 private:
  kernels::Backend backend_;
  Observer* observer_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  GpuInfo gpu_;
};

}  // namespace lantern
