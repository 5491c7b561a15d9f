// Probe (issue 14, session 28): does the SM clock drop while GEMM-bound work
// runs, and does the work slow with it? NVML's clock reading (1 ms samples)
// stays at 1965-1980 MHz while a 512-token prefill's GPU time moves between
// 1.98 and 2.15 ms, so this measures the clock from inside the GPU instead.
//
// One block of one busy thread on its own stream samples (%globaltimer,
// clock64) every --interval-us: the SM's effective clock over each interval is
// d(clock64) / d(ns). Meanwhile "bursts" of cuBLAS bf16 GEMMs shaped like the
// prefill's gate/up projection (512 x 16384 x 2048, ~45 us each; 40 of them
// ~ one 512-token prefill's GEMM time) run on another stream, each burst
// stamped with %globaltimer at its start and end. Per burst: its duration
// and the mean effective clock inside it. If bursts at a lower clock take
// longer in proportion, the prefill's spread is the clock.
//
// Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/clock_probe scripts/probe/clock_probe.cu -lcublas
//   /tmp/clock_probe [bursts=400] [gemms_per_burst=40] [idle_ms_between=0] [interval_us=50]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e));                      \
      return 1;                                                                \
    }                                                                          \
  } while (0)
#define CB(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s = (x);                                                    \
    if (s != CUBLAS_STATUS_SUCCESS) {                                          \
      std::printf("%s: cuBLAS status %d\n", #x, static_cast<int>(s));          \
      return 1;                                                                \
    }                                                                          \
  } while (0)

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 records (ns, cycles) every interval until `stop` is set or the buffer is full.
__global__ void clock_probe(unsigned long long* out, int max_samples, unsigned long long interval_ns,
                            volatile int* stop, int* count) {
  if (threadIdx.x != 0) return;
  unsigned long long next = global_ns();
  int n = 0;
  while (n < max_samples && !*stop) {
    const unsigned long long t = global_ns();
    if (t >= next) {
      out[2 * n] = t;
      out[2 * n + 1] = clock64();
      ++n;
      next = t + interval_ns;
    }
  }
  *count = n;
}

__global__ void stamp(unsigned long long* at) { *at = global_ns(); }

int main(int argc, char** argv) {
  const int bursts = argc > 1 ? std::atoi(argv[1]) : 400;
  const int per_burst = argc > 2 ? std::atoi(argv[2]) : 40;
  const double idle_ms = argc > 3 ? std::atof(argv[3]) : 0.0;
  const double interval_us = argc > 4 ? std::atof(argv[4]) : 50.0;
  const int m = 512, n = 16384, k = 2048;  // tokens, gate+up rows, hidden

  __nv_bfloat16 *a, *w, *c;
  CK(cudaMalloc(&a, size_t(m) * k * 2));
  CK(cudaMalloc(&w, size_t(n) * k * 2));
  CK(cudaMalloc(&c, size_t(m) * n * 2));
  CK(cudaMemset(a, 0x3c, size_t(m) * k * 2));  // ~1.1 in bf16: nonzero, finite products
  CK(cudaMemset(w, 0x3c, size_t(n) * k * 2));
  const int max_samples = 1 << 20;
  unsigned long long *samples, *stamps;
  int *count, *stop;
  CK(cudaMalloc(&samples, size_t(max_samples) * 2 * sizeof(unsigned long long)));
  CK(cudaMalloc(&stamps, size_t(bursts) * 2 * sizeof(unsigned long long)));
  CK(cudaMalloc(&count, sizeof(int)));
  CK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
  *stop = 0;
  int* stop_dev = nullptr;
  CK(cudaHostGetDevicePointer(&stop_dev, stop, 0));

  cudaStream_t work, probe;
  CK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking));
  cublasHandle_t h;
  CB(cublasCreate(&h));
  CB(cublasSetStream(h, work));
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&] {
    // Row-major C[m, n] = A[m, k] W[n, k]^T, as column-major C^T = W A^T.
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, a, CUDA_R_16BF, k, &zero, c,
                        CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 20; ++i) CB(gemm());  // warm-up: cuBLAS picks and loads its kernel
  CK(cudaStreamSynchronize(work));

  clock_probe<<<1, 32, 0, probe>>>(samples, max_samples, (unsigned long long)(interval_us * 1e3), stop_dev, count);
  CK(cudaGetLastError());
  for (int b = 0; b < bursts; ++b) {
    stamp<<<1, 1, 0, work>>>(stamps + 2 * b);
    for (int g = 0; g < per_burst; ++g) CB(gemm());
    stamp<<<1, 1, 0, work>>>(stamps + 2 * b + 1);
    if (idle_ms > 0) {
      CK(cudaStreamSynchronize(work));
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(idle_ms));
    }
  }
  CK(cudaStreamSynchronize(work));
  *stop = 1;
  CK(cudaStreamSynchronize(probe));

  int got = 0;
  CK(cudaMemcpy(&got, count, sizeof(int), cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> s(size_t(got) * 2), st(size_t(bursts) * 2);
  CK(cudaMemcpy(s.data(), samples, s.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(st.data(), stamps, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));

  // Effective MHz over [t_i, t_j] = (clk_j - clk_i) / (t_j - t_i) * 1000.
  auto mhz_between = [&](unsigned long long t0, unsigned long long t1) {
    int i0 = -1, i1 = -1;
    for (int i = 0; i < got; ++i) {
      if (i0 < 0 && s[2 * i] >= t0) i0 = i;
      if (s[2 * i] <= t1) i1 = i;
    }
    if (i0 < 0 || i1 <= i0) return 0.0;
    return double(s[2 * i1 + 1] - s[2 * i0 + 1]) / double(s[2 * i1] - s[2 * i0]) * 1e3;
  };
  std::printf("clock_probe: %d bursts of %d GEMMs %dx%dx%d (bf16), %.1f ms idle between, %d clock samples "
              "(every %.0f us)\n",
              bursts, per_burst, m, n, k, idle_ms, got, interval_us);
  std::vector<std::pair<double, double>> pts;  // (MHz, burst us)
  for (int b = 0; b < bursts; ++b) {
    const double us = (st[2 * b + 1] - st[2 * b]) / 1e3;
    const double mhz = mhz_between(st[2 * b], st[2 * b + 1]);
    if (mhz > 0) pts.emplace_back(mhz, us);
    if (b < 12 || b % 50 == 0) std::printf("  burst %4d: %8.1f us at %6.0f MHz\n", b, us, mhz);
  }
  if (pts.empty()) return 0;
  // Bursts by effective clock, and the clock-time product (us x MHz: cycles, constant if the
  // work is clock-bound).
  const double edges[] = {0, 1700, 1800, 1850, 1900, 1940, 1960, 1975, 1e9};
  std::printf("  clock bin (MHz)   bursts   mean us   mean MHz   us x MHz / 1e3 (Mcycles)\n");
  for (int e = 0; e + 1 < int(sizeof(edges) / sizeof(edges[0])); ++e) {
    int cnt = 0;
    double su = 0, sm = 0;
    for (auto [mhz, us] : pts)
      if (mhz >= edges[e] && mhz < edges[e + 1]) ++cnt, su += us, sm += mhz;
    if (cnt)
      std::printf("  [%4.0f, %4.0f)  %8d %9.1f %10.0f %12.1f\n", edges[e], std::min(edges[e + 1], 9999.0), cnt,
                  su / cnt, sm / cnt, su / cnt * sm / cnt / 1e3);
  }
  double mn = 1e9, mx = 0;
  for (auto [mhz, us] : pts) mn = std::min(mn, us), mx = std::max(mx, us);
  std::printf("  burst time min %.1f us, max %.1f us\n", mn, mx);
  return 0;
}
