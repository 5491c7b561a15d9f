#include "engine/device_kernels.h"

#include "kernels/base/cuda_check.h"

namespace lantern {

__global__ void scatter_i32_kernel(int32_t* dst, const int32_t* pairs, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[pairs[2 * i]] = pairs[2 * i + 1];
}

void launch_scatter_i32(int32_t* dst, const int32_t* pairs, int n, cudaStream_t stream) {
  if (n <= 0) return;
  scatter_i32_kernel<<<(n + 255) / 256, 256, 0, stream>>>(dst, pairs, n);
  CUDA_CHECK(cudaGetLastError());
}

__global__ void gather_i32_kernel(int32_t* dst, const int32_t* src, const int32_t* index, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && index[i] >= 0) dst[i] = src[index[i]];
}

void launch_gather_i32(int32_t* dst, const int32_t* src, const int32_t* index, int n, cudaStream_t stream) {
  if (n <= 0) return;
  gather_i32_kernel<<<(n + 255) / 256, 256, 0, stream>>>(dst, src, index, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lantern
