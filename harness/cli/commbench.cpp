#include "harness/cli/commbench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"

namespace lantern::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `iters` all_reduce calls one at a time (each synchronised, as the
// engine's per-op view sees them); returns the median in microseconds.
std::vector<double> time_cuda(Communicator& comm, void* buf, size_t count, int iters,
                              cudaStream_t s) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < iters + 3; ++i) {  // 3 warm-ups
    CUDA_CHECK(cudaEventRecord(a, s));
    comm.all_reduce(buf, count, ReduceType::bf16, s);
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) us.push_back(ms * 1e3);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return us;
}

std::vector<double> time_host(Communicator& comm, void* buf, size_t count, int iters) {
  std::vector<double> us;
  for (int i = 0; i < iters + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(buf, count, ReduceType::f32, nullptr);
    const double t =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 3) us.push_back(t);
  }
  return us;
}

}  // namespace

std::vector<CommbenchRow> run_commbench(Communicator& comm, kernels::Backend backend, int gpu,
                                        const std::vector<size_t>& sizes, int iters) {
  LANTERN_CHECK(!sizes.empty() && iters >= 1, "commbench needs sizes and iterations >= 1");
  const bool cuda = backend == kernels::Backend::cuda;
  const size_t elem = cuda ? 2 : 4, max_bytes = *std::max_element(sizes.begin(), sizes.end());
  void* buf = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<float> host;
  if (cuda) {
    CUDA_CHECK(cudaSetDevice(gpu));
    CUDA_CHECK(cudaMalloc(&buf, max_bytes));
    CUDA_CHECK(cudaMemset(buf, 0, max_bytes));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  } else {
    host.assign(max_bytes / 4 + 1, 0.0f);
    buf = host.data();
  }
  const double factor = comm.world() > 1 ? 2.0 * (comm.world() - 1) / comm.world() : 0.0;
  std::vector<CommbenchRow> rows;
  for (size_t bytes : sizes) {
    const size_t count = std::max<size_t>(1, bytes / elem);
    comm.barrier();
    const double us = median(cuda ? time_cuda(comm, buf, count, iters, stream)
                                  : time_host(comm, buf, count, iters));
    CommbenchRow r;
    r.bytes = count * elem;
    r.us = us;
    r.algbw_gbs = r.bytes / us / 1e3;
    r.busbw_gbs = factor * r.algbw_gbs;
    rows.push_back(r);
  }
  if (cuda) {
    CUDA_CHECK_LOG(cudaStreamDestroy(stream));
    CUDA_CHECK_LOG(cudaFree(buf));
  }
  return rows;
}

nlohmann::json commbench_json(const std::vector<CommbenchRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows)
    a.push_back({{"bytes", r.bytes},
                 {"median_us", r.us},
                 {"algbw_gb_per_s", r.algbw_gbs},
                 {"busbw_gb_per_s", r.busbw_gbs}});
  return a;
}

}  // namespace lantern::cli
