// Phase probe for gemm.8's wgmma kernel (docs/performance.md, session 22):
// includes kernels/cuda/sm90a/gemm_wgmma.cu with LANTERN_WG_PROBE defined, so
// every block stamps %globaltimer at entry, after the PDL wait, at its first
// full stage, after its last wgmma, after the partial tile's cluster barrier,
// after the reduce and at exit. For each shape it runs the kernel after an L2
// flush (median of 15 launches by event time) and prints, relative to the
// earliest block's entry, the quantiles over blocks of each stamp, the block
// count per SM and the span.
//   build: bash scripts/probe/build-probe.sh wg_phases; run: build/probe/wg_phases [shape ...]
//   shapes: qkv o gate_up down at m = 32/64/128 (gate_up also 129..4096: the wide form), e.g. o/64 gate_up/256
#define LANTERN_WG_PROBE 1
#include "kernels/cuda/sm90a/gemm_wgmma.cu"
#include "scripts/probe/probe_common.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace wgprobe {
using probe::fill_bf16;
using probe::quantile;
using namespace lantern;
using namespace lantern::kernels;

struct Shape {
  const char* name;
  int n, k;  // output columns (inter for gate_up), k
  bool swiglu;
};
const Shape kShapes[] = {{"qkv", 3072, 2048, false},
                         {"o", 2048, 2048, false},
                         {"gate_up", 8192, 2048, true},
                         {"down", 2048, 8192, false}};

void run(const Shape& sh, int m, void* flush, size_t flush_bytes, cudaStream_t st) {
  const int rows = sh.swiglu ? 2 * sh.n : sh.n;
  __nv_bfloat16 *a, *w, *c;
  CK(cudaMalloc(&a, size_t(m) * sh.k * 2));
  CK(cudaMalloc(&w, size_t(rows) * sh.k * 2));
  CK(cudaMalloc(&c, size_t(m) * sh.n * 2));
  fill_bf16<<<264, 256>>>(a, size_t(m) * sh.k, 1, 1.f);
  fill_bf16<<<264, 256>>>(w, size_t(rows) * sh.k, 2, 0.05f);
  CK(cudaDeviceSynchronize());
  LaunchCtx ctx;
  ctx.backend = Backend::cuda;
  ctx.stream = st;
  auto launch = [&] {
    if (sh.swiglu) {
      GateUpSwigluArgs g{a, w, c, nullptr, m, sh.n, sh.k};
      if (!gate_up_swiglu_wg_launch(g, ctx, /*wide=*/m > 128)) {
        std::fprintf(stderr, "shape does not fit\n");
        std::exit(1);
      }
    } else {
      gemm_wg_launch(GemmArgs{a, w, c, m, sh.n, sh.k}, ctx);
    }
  };
  launch();
  CK(cudaStreamSynchronize(st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  constexpr int kReps = 15;
  std::vector<double> ev;
  // Per stamp, per rep: quantiles over blocks (then the median over reps).
  std::vector<std::vector<double>> q10(8), q50(8), q90(8), qmax(8);
  std::vector<double> spans;
  int blocks = 0, per_sm_max = 0, sms_used = 0;
  for (int r = 0; r < kReps; ++r) {
    CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, st));
    static unsigned long long zero[4096][8];
    CK(cudaMemcpyToSymbolAsync(g_wg_probe, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, st));
    CK(cudaEventRecord(e0, st));
    launch();
    CK(cudaEventRecord(e1, st));
    CK(cudaStreamSynchronize(st));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ev.push_back(ms * 1000.0);
    static unsigned long long pr[4096][8];
    CK(cudaMemcpyFromSymbol(pr, g_wg_probe, sizeof(pr)));
    blocks = 0;
    while (blocks < 4096 && pr[blocks][0] != 0) ++blocks;
    unsigned long long t0 = ~0ull, tend = 0;
    for (int b = 0; b < blocks; ++b) t0 = std::min(t0, pr[b][0]), tend = std::max(tend, pr[b][6]);
    spans.push_back((tend - t0) / 1000.0);
    for (int s = 0; s < 7; ++s) {
      std::vector<double> v;
      for (int b = 0; b < blocks; ++b)
        if (pr[b][s] != 0) v.push_back((double(pr[b][s]) - double(t0)) / 1000.0);
      q10[s].push_back(quantile(v, 0.1));
      q50[s].push_back(quantile(v, 0.5));
      q90[s].push_back(quantile(v, 0.9));
      qmax[s].push_back(quantile(v, 1.0));
    }
    std::vector<int> per(256, 0);
    for (int b = 0; b < blocks; ++b) per[pr[b][7] & 255]++;
    per_sm_max = 0, sms_used = 0;
    for (int x : per) per_sm_max = std::max(per_sm_max, x), sms_used += x > 0;
  }
  static const char* kNames[7] = {"entry", "pdl_wait", "first_full", "last_mma", "tile_sync", "reduced", "exit"};
  std::printf("== %s m=%d: %d blocks on %d SMs (<= %d per SM); event %.2f us, block span %.2f us (medians of %d)\n",
              sh.name, m, blocks, sms_used, per_sm_max, quantile(ev, 0.5), quantile(spans, 0.5), kReps);
  std::printf("   %-11s %8s %8s %8s %8s   (us after the first block's entry; quantiles over blocks)\n", "stamp",
              "p10", "p50", "p90", "max");
  for (int s = 0; s < 7; ++s)
    std::printf("   %-11s %8.2f %8.2f %8.2f %8.2f\n", kNames[s], quantile(q10[s], 0.5), quantile(q50[s], 0.5),
                quantile(q90[s], 0.5), quantile(qmax[s], 0.5));
  CK(cudaFree(a));
  CK(cudaFree(w));
  CK(cudaFree(c));
}
}  // namespace wgprobe

int main(int argc, char** argv) {
  std::vector<std::string> want(argv + 1, argv + argc);
  if (want.empty()) want = {"o/64", "down/64", "qkv/64", "gate_up/64", "o/128", "gate_up/128", "o/32"};
  cudaStream_t st;
  if (cudaStreamCreate(&st) != cudaSuccess) return 1;
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) return 1;
  using namespace wgprobe;
  for (const auto& s : want) {
    const auto slash = s.find('/');
    const std::string name = s.substr(0, slash);
    const int m = slash == std::string::npos ? 64 : std::atoi(s.c_str() + slash + 1);
    bool found = false;
    for (const auto& sh : kShapes)
      if (name == sh.name) run(sh, m, flush, flush_bytes, st), found = true;
    if (!found) std::fprintf(stderr, "unknown shape %s (qkv o gate_up down)\n", name.c_str());
  }
  return 0;
}
