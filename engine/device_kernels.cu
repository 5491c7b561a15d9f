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

// One block per gathered row; T is the copy unit (16 bytes when both row
// sizes and all pointers allow it).
template <class T>
__global__ void gather_rows_kernel(T* a_dst, const T* a_src, size_t a_units, T* b_dst, const T* b_src,
                                   size_t b_units, const int32_t* index, int src_rows) {
  const int row = blockIdx.x;
  const int src = index[row];
  const bool valid = src >= 0 && src < src_rows;
  for (size_t u = threadIdx.x; u < a_units + b_units; u += blockDim.x) {
    const bool a = u < a_units;
    const size_t k = a ? u : u - a_units, units = a ? a_units : b_units;
    T* dst = (a ? a_dst : b_dst) + size_t(row) * units + k;
    *dst = valid ? (a ? a_src : b_src)[size_t(src) * units + k] : T{};
  }
}

void launch_gather_rows(void* a_dst, const void* a_src, size_t a_row, void* b_dst, const void* b_src, size_t b_row,
                        const int32_t* index, int n, int src_rows, cudaStream_t stream) {
  if (n <= 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int threads = 256;
  if (a_row % 16 == 0 && b_row % 16 == 0 && aligned(a_dst) && aligned(a_src) && aligned(b_dst) && aligned(b_src))
    gather_rows_kernel<uint4><<<n, threads, 0, stream>>>(
        static_cast<uint4*>(a_dst), static_cast<const uint4*>(a_src), a_row / 16, static_cast<uint4*>(b_dst),
        static_cast<const uint4*>(b_src), b_row / 16, index, src_rows);
  else
    gather_rows_kernel<unsigned char><<<n, threads, 0, stream>>>(
        static_cast<unsigned char*>(a_dst), static_cast<const unsigned char*>(a_src), a_row,
        static_cast<unsigned char*>(b_dst), static_cast<const unsigned char*>(b_src), b_row, index, src_rows);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lantern
