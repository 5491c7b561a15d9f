#include "harness/cli/commbench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "kernels/cuda/allreduce_p2p.h"

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

// `iters` calls captured back to back into one CUDA graph, replayed 3 + 5
// times: the median replay over iters, i.e. one call as a decode step sees it.
double time_cuda_graph(Communicator& comm, void* buf, size_t count, int iters, cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters; ++i) comm.all_reduce(buf, count, ReduceType::bf16, s);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int rep = 0; rep < 8; ++rep) {
    CUDA_CHECK(cudaEventRecord(a, s));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep >= 3) us.push_back(ms * 1e3 / iters);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return median(us);
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

// One checked call before timing: element i of rank r holds (i % 7) + r, small
// integers whose sum is exact in bf16, so every rank must read back
// N (i % 7) + N (N - 1) / 2 exactly; a wrong sum is an error naming the element.
void check_sum(Communicator& comm, bool cuda, void* buf, size_t count, cudaStream_t s) {
  const int n = comm.world(), r = comm.rank();
  std::vector<float> want(count), got(count);
  for (size_t i = 0; i < count; ++i) want[i] = float(n * int(i % 7) + n * (n - 1) / 2);
  if (cuda) {
    std::vector<uint16_t> bits(count);
    auto to_bf16 = [](float f) {  // exact for these small integers
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return static_cast<uint16_t>(u >> 16);
    };
    for (size_t i = 0; i < count; ++i) bits[i] = to_bf16(float(int(i % 7) + r));
    CUDA_CHECK(cudaMemcpy(buf, bits.data(), count * 2, cudaMemcpyHostToDevice));
    comm.all_reduce(buf, count, ReduceType::bf16, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(bits.data(), buf, count * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      const uint32_t u = uint32_t(bits[i]) << 16;
      std::memcpy(&got[i], &u, 4);
    }
  } else {
    auto* f = static_cast<float*>(buf);
    for (size_t i = 0; i < count; ++i) f[i] = float(int(i % 7) + r);
    comm.all_reduce(buf, count, ReduceType::f32, nullptr);
    std::copy(f, f + count, got.begin());
  }
  for (size_t i = 0; i < count; ++i)
    LANTERN_CHECK(got[i] == want[i],
                  "all_reduce gave a wrong sum on rank %d: element %zu of %zu is %g, expected %g (%d ranks)", r, i,
                  count, double(got[i]), double(want[i]), n);
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
    check_sum(comm, cuda, buf, count, stream);
    const double us = median(cuda ? time_cuda(comm, buf, count, iters, stream)
                                  : time_host(comm, buf, count, iters));
    CommbenchRow r;
    r.bytes = count * elem;
    r.us = us;
    r.algbw_gbs = r.bytes / us / 1e3;
    r.busbw_gbs = factor * r.algbw_gbs;
    if (cuda) {
      comm.barrier();
      r.graph_us = time_cuda_graph(comm, buf, count, iters, stream);
    }
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
                 {"busbw_gb_per_s", r.busbw_gbs},
                 {"graph_us", r.graph_us}});
  return a;
}

std::vector<CommbenchPath> run_commbench_paths(Communicator& comm, kernels::Backend backend, int gpu,
                                               const std::vector<size_t>& sizes, int iters) {
  std::vector<CommbenchPath> out;
  for (const std::string& path : comm.all_reduce_paths()) {
    comm.use_all_reduce_path(path);
    std::vector<size_t> mine;  // the P2P kernel takes messages up to its limit (NCCL above)
    for (size_t b : sizes)
      if (path != "p2p" || kernels::p2p_all_reduce_fits(b)) mine.push_back(b);
    if (!mine.empty()) out.push_back({path, run_commbench(comm, backend, gpu, mine, iters)});
  }
  comm.use_all_reduce_path("auto");
  return out;
}

}  // namespace lantern::cli
