// Probe (issue 14, session 37): does marking the prefill's gate/up output as
// persisting in L2 (cudaAccessPolicyWindow) make the SwiGLU after it read from
// L2 instead of HBM? Not built by CMake.
//
// A 512-token prefill's MLP, 16 layers with their own weights (1.6 GB, so no
// weight survives in L2): cuBLASLt gate/up GEMM [512, 2 x 8192] = x w_gu^T into
// G, a SwiGLU kernel G -> H [512, 8192], cuBLASLt down GEMM H w_d^T -> y. Run
// three ways, each timed per kernel with events over 20 repetitions (medians):
//   plain:    no access policy;
//   persist:  G (16 MB) in a persisting window (hitRatio 1), the set-aside 24 MB;
//   persist2: G and H both persisting (24 MB window over one allocation).
//   nvcc -O2 -std=c++17 -arch=sm_90a scripts/probe/l2_persist.cu -o build/probe/l2_persist -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_util.cuh"

using bf16 = __nv_bfloat16;
constexpr int kM = 512, kHidden = 2048, kInter = 8192, kLayers = 16, kReps = 20;

// h[r, j] = silu(g[r, j]) * g[r, inter + j], 8 elements per thread.
__global__ void swiglu(const bf16* __restrict__ g, bf16* __restrict__ h, int rows, int inter) {
  const int vecs = inter / 8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * vecs; i += gridDim.x * blockDim.x) {
    const int r = i / vecs, v = i % vecs;
    const uint4 a = *reinterpret_cast<const uint4*>(g + size_t(r) * 2 * inter + v * 8);
    const uint4 b = *reinterpret_cast<const uint4*>(g + size_t(r) * 2 * inter + inter + v * 8);
    const bf16* pa = reinterpret_cast<const bf16*>(&a);
    const bf16* pb = reinterpret_cast<const bf16*>(&b);
    uint4 o;
    bf16* po = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = __bfloat162float(pa[e]), u = __bfloat162float(pb[e]);
      po[e] = __float2bfloat16(x / (1.0f + __expf(-x)) * u);
    }
    *reinterpret_cast<uint4*>(h + size_t(r) * inter + v * 8) = o;
  }
}

struct Gemm {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t w, a, c;
  cublasLtMatmulAlgo_t algo;
  size_t ws = 0;
  Gemm(cublasLtHandle_t h, int m, int n, int k, size_t max_ws) {
    CB(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    CB(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
    CB(cublasLtMatrixLayoutInit(&w, CUDA_R_16BF, k, n, k));
    CB(cublasLtMatrixLayoutInit(&a, CUDA_R_16BF, k, m, k));
    CB(cublasLtMatrixLayoutInit(&c, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreferenceOpaque_t pref;
    CB(cublasLtMatmulPreferenceInit(&pref));
    const uint64_t w64 = max_ws;
    CB(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w64, sizeof w64));
    cublasLtMatmulHeuristicResult_t r{};
    int got = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(h, &op, &w, &a, &c, &c, &pref, 1, &r, &got));
    if (!got) exit(1);
    algo = r.algo;
    ws = r.workspaceSize;
  }
  void run(cublasLtHandle_t h, const void* W, const void* A, void* C, void* work, cudaStream_t s) {
    const float one = 1.f, zero = 0.f;
    CB(cublasLtMatmul(h, &op, &one, W, &w, A, &a, &zero, C, &c, C, &c, &algo, work, ws, s));
  }
};

int main() {
  cublasLtHandle_t h;
  CB(cublasLtCreate(&h));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int l2 = 0, persist_max = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&persist_max, cudaDevAttrMaxPersistingL2CacheSize, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s: L2 %d MB, persisting set-aside max %d MB, window max %d MB\n", prop.name, l2 >> 20,
         persist_max >> 20, prop.accessPolicyMaxWindowSize >> 20);
  const size_t gu = size_t(2) * kInter * kHidden, dn = size_t(kHidden) * kInter;
  bf16 *wgu, *wd, *x, *act, *y;
  void* work;
  CK(cudaMalloc(&wgu, gu * kLayers * 2));
  CK(cudaMalloc(&wd, dn * kLayers * 2));
  CK(cudaMalloc(&x, size_t(kM) * kHidden * 2));
  const size_t g_bytes = size_t(kM) * 2 * kInter * 2, h_bytes = size_t(kM) * kInter * 2;
  CK(cudaMalloc(&act, g_bytes + h_bytes));  // G then H, one allocation (the engine's scratch is one arena too)
  bf16* G = act;
  bf16* H = act + size_t(kM) * 2 * kInter;
  CK(cudaMalloc(&y, size_t(kM) * kHidden * 2));
  CK(cudaMalloc(&work, 32 << 20));
  probe_fill<<<2048, 256>>>(wgu, gu * kLayers, 1, 0.05f);
  probe_fill<<<2048, 256>>>(wd, dn * kLayers, 2, 0.05f);
  probe_fill<<<256, 256>>>(x, size_t(kM) * kHidden, 3, 0.05f);
  CK(cudaDeviceSynchronize());
  Gemm g1(h, kM, 2 * kInter, kHidden, 32 << 20), g2(h, kM, kHidden, kInter, 32 << 20);
  std::vector<cudaEvent_t> ev(4 * kLayers * kReps);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  auto pass = [&](const char* name, size_t window) {
    cudaStreamAttrValue attr = {};
    if (window) {
      CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, std::min<size_t>(window, size_t(persist_max))));
      attr.accessPolicyWindow.base_ptr = act;
      attr.accessPolicyWindow.num_bytes = std::min<size_t>(window, size_t(prop.accessPolicyMaxWindowSize));
      attr.accessPolicyWindow.hitRatio =
          std::min(1.0f, float(persist_max) / float(attr.accessPolicyWindow.num_bytes));
      attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
      attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    } else {
      attr.accessPolicyWindow.num_bytes = 0;
    }
    CK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &attr));
    for (int r = 0; r < kReps; ++r)
      for (int l = 0; l < kLayers; ++l) {
        cudaEvent_t* e = &ev[4 * (r * kLayers + l)];
        CK(cudaEventRecord(e[0], s));
        g1.run(h, wgu + gu * l, x, G, work, s);
        CK(cudaEventRecord(e[1], s));
        swiglu<<<4 * prop.multiProcessorCount, 512, 0, s>>>(G, H, kM, kInter);
        CK(cudaEventRecord(e[2], s));
        g2.run(h, wd + dn * l, H, y, work, s);
        CK(cudaEventRecord(e[3], s));
      }
    CK(cudaStreamSynchronize(s));
    std::vector<float> t[3];
    for (int r = 1; r < kReps; ++r)
      for (int l = 0; l < kLayers; ++l)
        for (int k = 0; k < 3; ++k) {
          float ms;
          CK(cudaEventElapsedTime(&ms, ev[4 * (r * kLayers + l) + k], ev[4 * (r * kLayers + l) + k + 1]));
          t[k].push_back(ms * 1e3f);
        }
    for (auto& v : t) std::sort(v.begin(), v.end());
    printf("%-9s gate/up GEMM %6.2f us  swiglu %5.2f us  down GEMM %6.2f us  (medians per layer)\n", name,
           t[0][t[0].size() / 2], t[1][t[1].size() / 2], t[2][t[2].size() / 2]);
    CK(cudaCtxResetPersistingL2Cache());
  };
  for (int round = 0; round < 2; ++round) {
    pass("plain", 0);
    pass("persist", g_bytes);
    pass("persist2", g_bytes + h_bytes);
  }
  return 0;
}
