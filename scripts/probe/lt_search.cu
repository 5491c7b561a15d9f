// Probe (issue 14, session 37): does an exhaustive cuBLASLt search find faster
// algorithms than gemm.6's planner (the heuristic's 16 candidates plus split-k
// 2 / 4 of its first four) on this model's GEMM shapes? Not built by CMake.
//
// For each shape (m rows, n weight rows, k) in the engine's layout (row-major
// c[m, n] = a[m, k] w[n, k]^T, bf16 in, bf16 out; `f32` shapes fp32 out) it:
//  1. builds the planner's candidate set and times it (the "planner" best);
//  2. enumerates every algorithm id (cublasLtMatmulAlgoGetIds) x tile x stages
//     x split-k {1, 2, 4, 8} x CTA swizzle x custom option x cluster shape that
//     cublasLtMatmulAlgoCheck accepts within the workspace, and times each;
//  3. re-times the planner's best and the enumeration's 12 best, interleaved,
//     11 rounds, and checks the winner's output against the planner's.
// Every timed launch follows an L2 flush (a memset of 2 x L2), as the planner
// times. Output: one block per shape on stdout, progress on stderr.
//   nvcc -O2 -std=c++17 -arch=sm_90a scripts/probe/lt_search.cu -o build/probe/lt_search -lcublasLt
//   build/probe/lt_search [m,n,k[,f32] ...]   (default: the model's shapes at m = 64, 256, 512)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_util.cuh"

namespace {

constexpr size_t kWorkspace = size_t(32) << 20;
constexpr int kSplits[] = {1, 2, 4, 8};
constexpr uint16_t kClusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                  CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                  CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1,
                                  CUBLASLT_CLUSTER_SHAPE_2x2x1};
constexpr size_t kMaxTimed = 4000;

struct Shape {
  int m, n, k;
  bool f32;
  std::string name;
};

struct Problem {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t w, a, c;
  explicit Problem(const Shape& s) {
    CB(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    CB(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
    CB(cublasLtMatrixLayoutInit(&w, CUDA_R_16BF, s.k, s.n, s.k));
    CB(cublasLtMatrixLayoutInit(&a, CUDA_R_16BF, s.k, s.m, s.k));
    CB(cublasLtMatrixLayoutInit(&c, s.f32 ? CUDA_R_32F : CUDA_R_16BF, s.n, s.m, s.n));
  }
};

struct Cand {
  cublasLtMatmulAlgo_t algo{};
  size_t ws = 0;
  std::string what;
  double us = INFINITY;
};

template <class T>
T cfg(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t wr = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &wr);
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[160];
  snprintf(buf, sizeof buf, "algo %d tile %u stages %u split %d red %u swz %u custom %u cluster %u",
           cfg<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), cfg<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
           cfg<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), cfg<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
           cfg<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), cfg<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
           cfg<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), unsigned(cfg<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)));
  return buf;
}

struct Bufs {
  void *w, *a, *c, *c2, *ws, *flush;
  size_t flush_n;
};

cublasStatus_t run(cublasLtHandle_t h, Problem& p, const Cand& c, const Bufs& b, void* out, cudaStream_t st) {
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(h, &p.op, &one, b.w, &p.w, b.a, &p.a, &zero, out, &p.c, out, &p.c, &c.algo,
                        c.ws ? b.ws : nullptr, c.ws, st);
}

// Median µs of each candidate over `reps` rounds, every launch after an L2 flush.
void time_all(cublasLtHandle_t h, Problem& p, std::vector<Cand>& cs, const Bufs& b, int reps, cudaStream_t st) {
  const size_t n = cs.size();
  std::vector<char> ok(n);
  for (size_t i = 0; i < n; ++i) ok[i] = run(h, p, cs[i], b, b.c, st) == CUBLAS_STATUS_SUCCESS;
  if (cudaStreamSynchronize(st) != cudaSuccess) {
    fprintf(stderr, "a candidate failed at run time\n");
    exit(1);
  }
  std::vector<cudaEvent_t> ev(2 * n * reps);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < n; ++i) {
      if (!ok[i]) continue;
      CK(cudaMemsetAsync(b.flush, r + 1, b.flush_n, st));
      CK(cudaEventRecord(ev[2 * (r * n + i)], st));
      run(h, p, cs[i], b, b.c, st);
      CK(cudaEventRecord(ev[2 * (r * n + i) + 1], st));
    }
  CK(cudaStreamSynchronize(st));
  for (size_t i = 0; i < n; ++i) {
    cs[i].us = INFINITY;
    if (!ok[i]) continue;
    std::vector<double> us(reps);
    for (int r = 0; r < reps; ++r) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, ev[2 * (r * n + i)], ev[2 * (r * n + i) + 1]));
      us[r] = ms * 1e3;
    }
    std::sort(us.begin(), us.end());
    cs[i].us = us[reps / 2];
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
}

// gemm.6's candidate set: the heuristic's 16, split-k 2 / 4 of its first four.
std::vector<Cand> planner_set(cublasLtHandle_t h, Problem& p) {
  cublasLtMatmulPreferenceOpaque_t pref;
  CB(cublasLtMatmulPreferenceInit(&pref));
  const uint64_t ws = size_t(8) << 20;
  CB(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t found[16] = {};
  int got = 0;
  CB(cublasLtMatmulAlgoGetHeuristic(h, &p.op, &p.w, &p.a, &p.c, &p.c, &pref, 16, found, &got));
  std::vector<Cand> out;
  for (int i = 0; i < got; ++i)
    if (found[i].state == CUBLAS_STATUS_SUCCESS) out.push_back({found[i].algo, found[i].workspaceSize, "heur " + std::to_string(i)});
  const size_t first = std::min<size_t>(out.size(), 4);
  for (size_t i = 0; i < first; ++i) {
    int32_t sup = 0;
    size_t wr = 0;
    cublasLtMatmulAlgoCapGetAttribute(&out[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sup, sizeof sup, &wr);
    if (!sup || cfg<int32_t>(out[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
    for (int32_t s : {2, 4}) {
      Cand c = out[i];
      const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t chk{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s) ||
          cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red) ||
          cublasLtMatmulAlgoCheck(h, &p.op, &p.w, &p.a, &p.c, &p.c, &c.algo, &chk) || chk.workspaceSize > ws)
        continue;
      c.ws = chk.workspaceSize;
      c.what = "heur " + std::to_string(i) + " split " + std::to_string(s);
      out.push_back(c);
    }
  }
  for (auto& c : out) c.what += " | " + describe(c.algo);
  return out;
}

template <class T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {T{}};
  std::vector<T> v(bytes / sizeof(T));
  cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes);
  if (v.empty()) v.push_back(T{});
  return v;
}

template <class T>
bool set(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  return cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
}

// Every configuration cublasLtMatmulAlgoCheck accepts for `p`.
std::vector<Cand> enumerate(cublasLtHandle_t h, Problem& p, const Shape& s) {
  int ids[256];
  int n_ids = 0;
  CB(cublasLtMatmulAlgoGetIds(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                              s.f32 ? CUDA_R_32F : CUDA_R_16BF, s.f32 ? CUDA_R_32F : CUDA_R_16BF, 256, ids, &n_ids));
  std::vector<Cand> out;
  size_t tried = 0;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                               s.f32 ? CUDA_R_32F : CUDA_R_16BF, s.f32 ? CUDA_R_32F : CUDA_R_16BF, ids[i], &base))
      continue;
    const auto tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    const auto stages = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    int32_t split_ok = 0, swz_ok = 0, custom_max = 0;
    size_t wr = 0;
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &split_ok, sizeof split_ok, &wr);
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok, sizeof swz_ok, &wr);
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max, &wr);
    size_t valid_here = 0;
    for (uint32_t tile : tiles)
      for (uint32_t st : stages)
        for (int32_t split : kSplits) {
          if (split > 1 && !split_ok) continue;
          for (uint32_t swz = 0; swz <= (swz_ok ? 1u : 0u); ++swz)
            for (uint32_t custom = 0; custom <= uint32_t(std::min(custom_max, 63)); ++custom)
              for (uint16_t cl : kClusters) {
                cublasLtMatmulAlgo_t a = base;
                const uint32_t red = split > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
                if (!set(a, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) || !set(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, st) ||
                    !set(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split) || !set(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, red) ||
                    !set(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz) || !set(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom) ||
                    !set(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cl))
                  continue;
                ++tried;
                cublasLtMatmulHeuristicResult_t chk{};
                if (cublasLtMatmulAlgoCheck(h, &p.op, &p.w, &p.a, &p.c, &p.c, &a, &chk) != CUBLAS_STATUS_SUCCESS ||
                    chk.workspaceSize > kWorkspace)
                  continue;
                ++valid_here;
                out.push_back({a, chk.workspaceSize, describe(a)});
              }
        }
    fprintf(stderr, "  algo id %d: tiles %zu stages %zu split %d swz %d custom_max %d -> %zu valid\n", ids[i],
            tiles.size(), stages.size(), split_ok, swz_ok, custom_max, valid_here);
  }
  fprintf(stderr, "  %d algo ids, %zu configurations tried, %zu valid\n", n_ids, tried, out.size());
  if (out.size() > kMaxTimed) {  // keep an even sample
    std::vector<Cand> kept;
    for (size_t i = 0; i < kMaxTimed; ++i) kept.push_back(out[i * out.size() / kMaxTimed]);
    out.swap(kept);
  }
  return out;
}

double max_rel_diff(const Shape& s, const Bufs& b) {
  const size_t n = size_t(s.m) * s.n;
  std::vector<float> x(n), y(n);
  if (s.f32) {
    CK(cudaMemcpy(x.data(), b.c, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y.data(), b.c2, n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<__nv_bfloat16> xb(n), yb(n);
    CK(cudaMemcpy(xb.data(), b.c, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yb.data(), b.c2, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) x[i] = __bfloat162float(xb[i]), y[i] = __bfloat162float(yb[i]);
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) num += double(x[i] - y[i]) * (x[i] - y[i]), den += double(y[i]) * y[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

void search(cublasLtHandle_t h, const Shape& s, Bufs& b, cudaStream_t st) {
  fprintf(stderr, "%s m=%d n=%d k=%d%s\n", s.name.c_str(), s.m, s.n, s.k, s.f32 ? " f32" : "");
  Problem p(s);
  auto plan = planner_set(h, p);
  time_all(h, p, plan, b, 5, st);
  std::sort(plan.begin(), plan.end(), [](const Cand& x, const Cand& y) { return x.us < y.us; });
  auto all = enumerate(h, p, s);
  time_all(h, p, all, b, 3, st);
  std::sort(all.begin(), all.end(), [](const Cand& x, const Cand& y) { return x.us < y.us; });
  std::vector<Cand> final_set;
  final_set.push_back(plan.front());
  for (size_t i = 0; i < std::min<size_t>(12, all.size()); ++i) final_set.push_back(all[i]);
  time_all(h, p, final_set, b, 11, st);
  const Cand planner = final_set.front();
  std::sort(final_set.begin() + 1, final_set.end(), [](const Cand& x, const Cand& y) { return x.us < y.us; });
  const double flop = 2.0 * s.m * s.n * s.k;
  const double bytes = 2.0 * (double(s.n) * s.k + double(s.m) * s.k) + (s.f32 ? 4.0 : 2.0) * s.m * s.n;
  printf("== %s m=%d n=%d k=%d%s: %zu planner candidates, %zu enumerated timed\n", s.name.c_str(), s.m, s.n, s.k,
         s.f32 ? " f32" : "", plan.size(), all.size());
  auto line = [&](const char* tag, const Cand& c) {
    printf("  %-9s %8.2f us  %6.1f TFLOP/s  %5.2f TB/s  %s\n", tag, c.us, flop / c.us * 1e-6, bytes / c.us * 1e-6,
           c.what.c_str());
  };
  line("planner", planner);
  for (size_t i = 1; i < std::min<size_t>(6, final_set.size()); ++i) line(i == 1 ? "enum best" : "enum", final_set[i]);
  if (final_set.size() > 1) {
    run(h, p, planner, b, b.c2, st);
    run(h, p, final_set[1], b, b.c, st);
    CK(cudaStreamSynchronize(st));
    printf("  ratio enum best / planner %.3f; output rel-L2 vs planner %.2e\n", final_set[1].us / planner.us,
           max_rel_diff(s, b));
  }
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    Shape s{};
    char f[8] = {};
    if (sscanf(argv[i], "%d,%d,%d,%7s", &s.m, &s.n, &s.k, f) < 3) {
      fprintf(stderr, "usage: lt_search [m,n,k[,f32] ...]\n");
      return 2;
    }
    s.f32 = std::string(f) == "f32";
    s.name = "arg";
    shapes.push_back(s);
  }
  struct Named {
    const char* name;
    int n, k;
  };
  const Named model[] = {{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};
  if (shapes.empty())
    for (int m : {512, 256, 64})
      for (const Named& x : model) shapes.push_back(Shape{m, x.n, x.k, false, x.name});
  size_t max_w = 0, max_a = 0, max_c = 0;
  for (auto& s : shapes) {
    max_w = std::max(max_w, size_t(s.n) * s.k * 2);
    max_a = std::max(max_a, size_t(s.m) * s.k * 2);
    max_c = std::max(max_c, size_t(s.m) * s.n * 4);
  }
  Bufs b{};
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  b.flush_n = size_t(2) * l2;
  CK(cudaMalloc(&b.w, max_w));
  CK(cudaMalloc(&b.a, max_a));
  CK(cudaMalloc(&b.c, max_c));
  CK(cudaMalloc(&b.c2, max_c));
  CK(cudaMalloc(&b.ws, kWorkspace));
  CK(cudaMalloc(&b.flush, b.flush_n));
  probe_fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b.w), max_w / 2, 1, 0.1f);
  probe_fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b.a), max_a / 2, 2, 0.1f);
  CK(cudaDeviceSynchronize());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, L2 %d MB, cuBLASLt %zu\n", prop.name, prop.multiProcessorCount, l2 >> 20,
         cublasLtGetVersion());
  cublasLtHandle_t h;
  CB(cublasLtCreate(&h));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  for (auto& s : shapes) search(h, s, b, st);
  return 0;
}
