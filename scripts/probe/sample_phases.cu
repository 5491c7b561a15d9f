// Phase probe of the cluster samplers (docs/performance.md, "sample.5 cluster_lean"):
// one b = 1 row of 128256 uniform logits in [-8, 8], T 0.8, top_p 0.95 or top_k 50 +
// top_p 0.9, hot and with L2 flushed; per phase the median over 10 launches of block 0's
// %globaltimer (ns) and clock64 (cycles) deltas; then microbenchmarks of a cluster
// barrier, __syncthreads and a distributed-shared-memory all-to-all read.
// Built by scripts/probe/build-sample-probes.sh with the kernel source stamped by
// stamp_sampler.py (-DLEAN: sample.5, else sample.4; NB: blocks per row at b = 1).
#ifdef LEAN
#include "stamped_lean.cu"
#define SAMPLE_FN sample_cluster_lean
#else
#include "stamped_gather.cu"
#define SAMPLE_FN sample_cluster_gather
#endif
#include <cstdio>
#include <vector>
#include <random>
#include <algorithm>
namespace cg2 = cooperative_groups;

template <int kC>
__global__ void __cluster_dims__(kC,1,1) __launch_bounds__(1024,1) sync_bench(unsigned long long* out, int iters) {
  cg2::cluster_group cl = cg2::this_cluster();
  cl.sync();
  unsigned long long t0 = clock64();
  for (int i = 0; i < iters; ++i) cl.sync();
  unsigned long long t1 = clock64();
  __shared__ unsigned h[1024];
  __shared__ unsigned long long m[1024];
  h[threadIdx.x] = threadIdx.x; m[threadIdx.x] = threadIdx.x;
  cl.sync();
  unsigned long long t2 = clock64();
  unsigned c[kC]; unsigned long long mm[kC];
#pragma unroll
  for (int q = 0; q < kC; ++q) { c[q] = cl.map_shared_rank(h, q)[threadIdx.x]; mm[q] = cl.map_shared_rank(m, q)[threadIdx.x]; }
  unsigned long long s = 0;
#pragma unroll
  for (int q = 0; q < kC; ++q) s += c[q] + mm[q];
  __syncthreads();
  unsigned long long t3 = clock64();
  // 32 __syncthreads
  for (int i = 0; i < 32; ++i) __syncthreads();
  unsigned long long t4 = clock64();
  cl.sync();
  if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = (t1 - t0) / iters; out[1] = t3 - t2; out[2] = (t4 - t3) / 32; out[3] = s; }
}

#ifndef NB
#define NB 8
#endif
int main() {
  using namespace lantern::kernels;
  const int V = 128256;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> U(-8.f, 8.f);
  std::vector<float> h(V);
  for (auto& x : h) x = U(rng);
  float *d_l, *d_t, *d_p; int *d_k, *d_s, *d_o; unsigned long long* d_seed;
  cudaMalloc(&d_l, V * 4); cudaMalloc(&d_t, 4); cudaMalloc(&d_p, 4); cudaMalloc(&d_k, 4);
  cudaMalloc(&d_s, 4); cudaMalloc(&d_o, 4); cudaMalloc(&d_seed, 8);
  cudaMemcpy(d_l, h.data(), V * 4, cudaMemcpyHostToDevice);
  float T = 0.8f; int st = 3; unsigned long long seed = 42;
  cudaMemcpy(d_t, &T, 4, cudaMemcpyHostToDevice); cudaMemcpy(d_s, &st, 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seed, &seed, 8, cudaMemcpyHostToDevice);
  void* flush; cudaMalloc(&flush, 256 << 20);
  SampleArgs a{d_l, d_t, d_k, d_p, (const uint64_t*)d_seed, d_s, d_o, 1, V};
  LaunchCtx ctx; ctx.backend = Backend::cuda;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int cfg = 0; cfg < 4; ++cfg) {
    int k = (cfg & 1) ? 50 : 0; float p = (cfg & 1) ? 0.9f : 0.95f; bool cold = cfg >= 2;
    cudaMemcpy(d_k, &k, 4, cudaMemcpyHostToDevice); cudaMemcpy(d_p, &p, 4, cudaMemcpyHostToDevice);
    std::vector<std::vector<double>> ph(16), phc(16); std::vector<float> ev;
    for (int it = 0; it < 12; ++it) {
      if (cold) cudaMemset(flush, it, 256 << 20);
      cudaEventRecord(e0);
      SAMPLE_FN(a, ctx);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); ev.push_back(ms * 1000);
      unsigned long long gt[64][16], ck[64][16];
      cudaMemcpyFromSymbol(gt, g_gt, sizeof gt); cudaMemcpyFromSymbol(ck, g_clk, sizeof ck);
      cudaMemset(flush, 0, 0);
      if (it < 2) continue;
      for (int i = 1; i <= 10; ++i) {
        unsigned long long mx = 0;  // max over blocks of the phase end, minus min start
        unsigned long long st0 = ~0ull;
        for (int b = 0; b < NB; ++b) { mx = std::max(mx, gt[b][i]); st0 = std::min(st0, gt[b][0]); }
        ph[i].push_back(double(gt[0][i]) - double(gt[0][i - 1]));
        phc[i].push_back(double(ck[0][i]) - double(ck[0][i - 1]));
        if (i == 10) ph[0].push_back(double(mx) - double(st0));
      }
      // reset
      cudaMemset(flush, 0, 16);
      unsigned long long z[64][16] = {};
      cudaMemcpyToSymbol(g_gt, z, sizeof z); cudaMemcpyToSymbol(g_clk, z, sizeof z);
    }
    auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? -1.0 : v[v.size() / 2]; };
    std::sort(ev.begin(), ev.end());
    int tok; cudaMemcpy(&tok, d_o, 4, cudaMemcpyDeviceToHost);
    std::printf("cfg top_k=%d top_p=%.2f %s: event %.1f us (token %d); phases of block 0 (ns / cycles); rank0 span to PH10 %.0f ns\n",
                k, p, cold ? "L2 flushed" : "hot", ev[ev.size() / 2], tok, med(ph[0]));
#ifdef LEAN
    const char* names[] = {"", "load+argmax", "max sync", "hist local", "reduce-scatter (2 syncs)", "owner read+scans", "plan+n", "push", "gather sync", "tag(r0)", "resolve(r0)+verdict sync"};
#else
    const char* names[] = {"", "load+argmax", "max sync", "hist local", "hist merge+scan", "plan+offsets", "push_run", "gather sync", "merge_and_scan(r0)", "resolve+verdict sync", "->PH10"};
#endif
    for (int i = 1; i <= 10; ++i) std::printf("  %2d %-22s %8.0f ns %8.0f cyc\n", i, names[i], med(ph[i]), med(phc[i]));
  }
  unsigned long long* d_out; cudaMalloc(&d_out, 64);
  unsigned long long r[4];
  sync_bench<8><<<8, 1024>>>(d_out, 64); cudaDeviceSynchronize();
  cudaMemcpy(r, d_out, 32, cudaMemcpyDeviceToHost);
  std::printf("cluster 8 x 1024: cl.sync %llu cyc, DSMEM all-to-all 1024x12B x8 peers %llu cyc, __syncthreads %llu cyc\n", r[0], r[1], r[2]);
  cudaFuncSetAttribute(sync_bench<16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  sync_bench<16><<<16, 1024>>>(d_out, 64); cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpy(r, d_out, 32, cudaMemcpyDeviceToHost);
  std::printf("cluster 16 x 1024 (%s): cl.sync %llu cyc, DSMEM all-to-all x16 peers %llu cyc, __syncthreads %llu cyc\n", cudaGetErrorString(e), r[0], r[1], r[2]);
  return 0;
}
