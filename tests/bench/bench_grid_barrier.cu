// What a phase boundary costs on the GPU: the question a per-layer persistent
// decode kernel has to answer first (docs/performance.md, session 34: the
// batch-1 step's remaining gap is the boundaries between weight streams).
//
// Each benchmark runs `phases` phases of the same tiny work (every block
// writes one value per phase) over a full wave of blocks (2 per SM, 256
// threads), separated by:
//   pdl_chain    one kernel per phase, programmatic dependent launch (each
//                waits for its predecessor, triggers its dependents at once),
//                captured in a CUDA graph and replayed: the engine's boundary
//   plain_chain  the same without PDL (a full launch gap per boundary)
//   grid_sync    one cooperative kernel, cooperative_groups' grid.sync()
//                between phases
//   flag_barrier one cooperative kernel, a counter barrier of our own (block
//                arrives with a release atomic, thread 0 spins on an acquire
//                load: the barrier a persistent kernel would use)
// Wall time by CUDA events around 20 replays or launches; the counter
// us_per_phase is the median iteration's time over the phases. A boundary
// costs (16 x us_per_phase at phases = 16 - the time at phases = 1) / 15,
// as the program's first line says.
//
//   build/<preset>/bench/bench_grid_barrier      (needs a GPU; skips without)
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/base/cuda_check.h"

namespace {
namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kReps = 20;

__device__ __forceinline__ void work(float* out, int phase) {
  if (threadIdx.x == 0) out[size_t(phase) * gridDim.x + blockIdx.x] += 1.0f;
}

__global__ void phase_kernel(float* out, int phase, bool pdl) {
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  work(out, phase);
}

__global__ void grid_sync_kernel(float* out, int phases) {
  cg::grid_group grid = cg::this_grid();
  for (int p = 0; p < phases; ++p) {
    work(out, p);
    if (p + 1 < phases) grid.sync();
  }
}

__device__ unsigned int g_arrivals;

__global__ void flag_barrier_kernel(float* out, int phases) {
  for (int p = 0; p < phases; ++p) {
    work(out, p);
    if (p + 1 == phases) break;
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned int target = gridDim.x * unsigned(p + 1);
      __threadfence();
      atomicAdd(&g_arrivals, 1u);
      unsigned int seen = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(&g_arrivals) : "memory");
      } while (seen < target);
    }
    __syncthreads();
  }
}

__global__ void reset_arrivals() { g_arrivals = 0; }

struct Setup {
  int blocks = 0;
  float* out = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Setup() {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    blocks = 2 * sms;
    CUDA_CHECK(cudaMalloc(&out, sizeof(float) * size_t(blocks) * 64));
    CUDA_CHECK(cudaMemset(out, 0, sizeof(float) * size_t(blocks) * 64));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Setup() {
    CUDA_CHECK_LOG(cudaEventDestroy(start));
    CUDA_CHECK_LOG(cudaEventDestroy(stop));
    CUDA_CHECK_LOG(cudaStreamDestroy(stream));
    CUDA_CHECK_LOG(cudaFree(out));
  }
  // Median over the state's iterations of (kReps runs of fn) / kReps, in seconds.
  template <class Fn>
  void time(benchmark::State& st, int phases, Fn&& fn) {
    fn();  // warm: module load, graph upload
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> per_run;
    for (auto _ : st) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < kReps; ++r) fn();
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      per_run.push_back(ms * 1e-3 / kReps);
      st.SetIterationTime(per_run.back());
    }
    std::sort(per_run.begin(), per_run.end());
    st.counters["phases"] = phases;
    st.counters["us_per_phase"] = per_run[per_run.size() / 2] * 1e6 / phases;
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void launch_phase(const Setup& s, int phase, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr = {};
  cfg.gridDim = dim3(unsigned(s.blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s.stream;
  if (pdl) {
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, phase_kernel, s.out, phase, pdl));
}

void chain(benchmark::State& st, bool pdl) {
  if (!have_gpu()) return st.SkipWithError("no CUDA device");
  Setup& s = setup();
  const int phases = int(st.range(0));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  for (int p = 0; p < phases; ++p) launch_phase(s, p, pdl);
  CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  s.time(st, phases, [&] { CUDA_CHECK(cudaGraphLaunch(exec, s.stream)); });
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

void cooperative(benchmark::State& st, void (*kernel)(float*, int), bool reset) {
  if (!have_gpu()) return st.SkipWithError("no CUDA device");
  Setup& s = setup();
  int phases = int(st.range(0));
  void* args[] = {&s.out, &phases};
  s.time(st, phases, [&] {
    if (reset) reset_arrivals<<<1, 1, 0, s.stream>>>();
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), dim3(unsigned(s.blocks)), dim3(kThreads),
                                           args, 0, s.stream));
  });
}

void register_all() {
  auto add = [](const char* name, auto fn) {
    benchmark::RegisterBenchmark(name, fn)->Arg(1)->Arg(16)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(
        25);
  };
  add("pdl_chain", [](benchmark::State& st) { chain(st, true); });
  add("plain_chain", [](benchmark::State& st) { chain(st, false); });
  add("grid_sync", [](benchmark::State& st) { cooperative(st, grid_sync_kernel, false); });
  add("flag_barrier", [](benchmark::State& st) { cooperative(st, flag_barrier_kernel, true); });
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("bench_grid_barrier: a boundary's cost = (us_per_phase x 16 at phases=16 - the phases=1 time) / 15\n");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
