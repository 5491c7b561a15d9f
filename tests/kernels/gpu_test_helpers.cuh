#pragma once
// Helpers for the kernel GPU tests: device buffers, bf16 host data, the CUDA
// variants of a family, and the CPU reference (variant 0) to compare against.
//
// Every test draws fresh random inputs (tests/test_util.h seeds them), rounds
// them to bf16 on the host so the reference and the GPU see the same values,
// poisons outputs with NaN before a launch (0xFF bytes: NaN in bf16 and fp32)
// so an unwritten element fails, and compares with documented tolerances.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/base/bf16.h"
#include "kernels/base/cuda_check.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::test {

// A device allocation that frees itself.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n) CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceBuffer() {
    if (p_) CUDA_CHECK_LOG(cudaFree(p_));
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    if (n_) CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_) CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void poison() {  // all-ones bytes: NaN as bf16 and as fp32, -1 as int32
    if (n_) CUDA_CHECK(cudaMemset(p_, 0xff, n_ * sizeof(T)));
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Stream, cuBLAS handle and a workspace grown on demand.
struct GpuEnv {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer<unsigned char> workspace;

  GpuEnv() {
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUBLAS_CHECK(cublasCreate(&cublas));
  }
  ~GpuEnv() {
    CUBLAS_CHECK_LOG(cublasDestroy(cublas));
    CUDA_CHECK_LOG(cudaStreamDestroy(stream));
  }
  // Context for `e` with a workspace sized by its workspace_bytes(shape).
  kernels::LaunchCtx ctx(const kernels::KernelEntry& e, const kernels::WorkspaceShape& shape) {
    const size_t need = e.workspace_bytes ? e.workspace_bytes(shape) : 0;
    if (need > workspace.size()) workspace = DeviceBuffer<unsigned char>(need);
    if (need) CUDA_CHECK(cudaMemset(workspace.get(), 0xff, need));  // stale scratch must not matter
    kernels::LaunchCtx c;
    c.backend = kernels::Backend::cuda;
    c.stream = stream;
    c.cublas = cublas;
    c.workspace = need ? workspace.get() : nullptr;
    c.workspace_bytes = need;
    return c;
  }
  void sync() { CUDA_CHECK(cudaStreamSynchronize(stream)); }
};

inline kernels::LaunchCtx cpu_ctx() { return kernels::LaunchCtx{}; }

// Every CUDA variant of a family (later variants are picked up automatically).
inline std::vector<const kernels::KernelEntry*> cuda_variants(kernels::Family f) {
  std::vector<const kernels::KernelEntry*> out;
  for (const kernels::KernelEntry* e : kernels::Registry::global().variants(f))
    if (e->backend == kernels::Backend::cuda) out.push_back(e);
  return out;
}

inline const kernels::KernelEntry& cpu_reference(kernels::Family f) {
  return kernels::Registry::global().find(f, "0");
}

inline std::string variant_label(const kernels::KernelEntry& e) {
  return std::string(kernels::family_name(e.family)) + "." + std::to_string(e.variant) + " (" +
         e.name + ")";
}

// Random values already rounded to bf16: `bits` for the device, `values` (the
// same numbers as float) for the CPU reference.
struct Bf16Data {
  std::vector<bf16_bits> bits;
  std::vector<float> values;
};

inline Bf16Data random_bf16(size_t n, float lo = -1.f, float hi = 1.f) {
  Bf16Data d;
  d.values = random_floats(n, lo, hi);
  d.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = float_to_bf16(d.values[i]);
    d.values[i] = bf16_to_float(d.bits[i]);
  }
  return d;
}

// Fast fill for big tables (the embedding / LM head): splitmix64 from a fresh
// seed drawn from the test rng, values in [-1, 1) rounded to bf16.
inline std::vector<bf16_bits> random_bf16_bits_fast(size_t n) {
  uint64_t state = rng()();
  std::vector<bf16_bits> bits(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float f = float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    bits[i] = float_to_bf16(f);
  }
  return bits;
}

inline std::vector<float> bf16_to_floats(const std::vector<bf16_bits>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// The spacing of bf16 values at |v| (8 significant bits): one ulp.
inline double bf16_ulp(float v) {
  int e = 0;
  std::frexp(v == 0.f ? 1e-30f : v, &e);
  return std::ldexp(1.0, e - 8);
}

// Paged-cache inputs for m decode rows: block tables of m + 1 slots x
// max_blocks (every block once, shuffled) and m distinct random slots.
inline void random_paging(int m, int max_blocks, std::vector<int32_t>& tables, std::vector<int32_t>& slots) {
  const int max_seqs = m + 1;
  tables.resize(size_t(max_seqs) * max_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng());
  slots.resize(max_seqs);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng());
  slots.resize(m);  // distinct: one row per sequence
}

// qkv's k and v columns of m rows ([m, q_dim + 2 kv_dim] -> [m, 2 kv_dim]).
inline std::vector<float> kv_columns(const std::vector<float>& qkv, int m, int q_dim, int kv_dim) {
  std::vector<float> out;
  const int cols = q_dim + 2 * kv_dim;
  for (int t = 0; t < m; ++t)
    out.insert(out.end(), qkv.begin() + size_t(t) * cols + q_dim, qkv.begin() + size_t(t + 1) * cols);
  return out;
}

// RoPE inverse frequencies for head_dim (theta 500000, no llama3 scaling): test inputs.
inline std::vector<float> plain_inv_freq(int head_dim) {
  std::vector<float> f(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) f[j] = float(1.0 / std::pow(500000.0, 2.0 * j / head_dim));
  return f;
}

// Element-wise tolerance plus a relative-L2 bound; NaN never passes.
inline ::testing::AssertionResult matches(const std::vector<float>& got,
                                          const std::vector<float>& ref, double atol, double rtol,
                                          double max_rel_l2) {
  ::testing::AssertionResult close = all_close(got, ref, atol, rtol);
  if (!close) return close;
  const double err = rel_l2(got, ref);
  if (!(err <= max_rel_l2))
    return ::testing::AssertionFailure() << "rel-L2 error " << err << " > " << max_rel_l2;
  return ::testing::AssertionSuccess() << "rel-L2 " << err;
}

}  // namespace lantern::test
