// The host side of scripts/probe/persistent_layer.cu: the random model on the GPU and
// its fp32 CPU reference (2 layers are checked against it), and the rel-L2 error.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "persistent_layer_device.cuh"
#include "probe_common.cuh"

namespace pl {

struct Model {
  std::vector<LayerW> host;
  LayerW* dev = nullptr;
  std::vector<void*> allocs;
};

Model make_model(int n_layers) {
  Model m;
  for (int l = 0; l < n_layers; ++l) {
    LayerW L{};
    auto bf = [&](size_t n, float scale, unsigned seed) {
      __nv_bfloat16* d;
      CK(cudaMalloc(&d, n * 2));
      probe::fill_bf16<<<1024, 256>>>(d, n, seed, scale);
      m.allocs.push_back(d);
      return d;
    };
    L.qkv = bf(size_t(QKV) * H, 0.04f, 11 + 7 * l);
    L.o = bf(size_t(H) * QD, 0.04f, 12 + 7 * l);
    L.gu = bf(size_t(2 * I) * H, 0.04f, 13 + 7 * l);
    L.d = bf(size_t(H) * I, 0.02f, 14 + 7 * l);
    std::vector<float> n(H);
    for (int i = 0; i < H; ++i) n[i] = 1.f + 0.1f * std::sin(0.01f * i + l);
    float *n1, *n2;
    CK(cudaMalloc(&n1, H * 4));
    CK(cudaMalloc(&n2, H * 4));
    CK(cudaMemcpy(n1, n.data(), H * 4, cudaMemcpyHostToDevice));
    for (auto& v : n) v = 2.f - v;
    CK(cudaMemcpy(n2, n.data(), H * 4, cudaMemcpyHostToDevice));
    m.allocs.push_back(n1);
    m.allocs.push_back(n2);
    L.n1 = n1;
    L.n2 = n2;
    m.host.push_back(L);
  }
  CK(cudaMalloc(&m.dev, sizeof(LayerW) * n_layers));
  CK(cudaMemcpy(m.dev, m.host.data(), sizeof(LayerW) * n_layers, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  return m;
}

std::vector<float> to_host_f(const __nv_bfloat16* d, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

// The CPU reference of n layers (fp32 weights from the same bf16, double sums).
std::vector<float> cpu_layers(const Model& m, int n, std::vector<float> x, const __nv_bfloat16* kv, int ctx) {
  auto gemv = [](const std::vector<float>& w, const std::vector<float>& v, int rows, int k) {
    std::vector<float> y(rows);
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (int i = 0; i < k; ++i) s += double(w[size_t(r) * k + i]) * v[i];
      y[r] = float(s);
    }
    return y;
  };
  auto norm = [](const std::vector<float>& v, const float* wd) {
    std::vector<float> w(H);
    CK(cudaMemcpy(w.data(), wd, H * 4, cudaMemcpyDeviceToHost));
    double ss = 0;
    for (float f : v) ss += double(f) * f;
    const float r = float(1.0 / std::sqrt(ss / H + kEps));
    std::vector<float> o(H);
    for (int i = 0; i < H; ++i) o[i] = v[i] * r * w[i];
    return o;
  };
  for (int l = 0; l < n; ++l) {
    const LayerW& L = m.host[l];
    const auto qkv = gemv(to_host_f(L.qkv, size_t(QKV) * H), norm(x, L.n1), QKV, H);
    std::vector<float> attn(qkv.begin(), qkv.begin() + QD);
    if (ctx > 0) {
      const size_t head_rows = size_t(ctx) * HD;
      const auto kvl = to_host_f(kv + size_t(l) * 16 * head_rows, 16 * head_rows);
      for (int h = 0; h < QD / HD; ++h) {
        const float* K = kvl.data() + (h / 4) * head_rows;
        const float* V = K + 8 * head_rows;
        std::vector<double> sc(ctx);
        double mx = -1e300, sum = 0;
        for (int k = 0; k < ctx; ++k) {
          double d = 0;
          for (int j = 0; j < HD; ++j) d += double(qkv[h * HD + j]) * K[size_t(k) * HD + j];
          sc[k] = d * 0.125, mx = std::max(mx, sc[k]);
        }
        for (auto& v : sc) v = std::exp(v - mx), sum += v;
        for (int j = 0; j < HD; ++j) {
          double o = 0;
          for (int k = 0; k < ctx; ++k) o += sc[k] * V[size_t(k) * HD + j];
          attn[h * HD + j] = float(o / sum);
        }
      }
    }
    const auto o = gemv(to_host_f(L.o, size_t(H) * QD), attn, H, QD);
    for (int i = 0; i < H; ++i) x[i] += o[i];
    const auto gu = gemv(to_host_f(L.gu, size_t(2 * I) * H), norm(x, L.n2), 2 * I, H);
    std::vector<float> act(I);
    for (int i = 0; i < I; ++i) act[i] = gu[i] / (1.f + std::exp(-gu[i])) * gu[I + i];
    const auto d = gemv(to_host_f(L.d, size_t(H) * I), act, H, I);
    for (int i = 0; i < H; ++i) x[i] += d[i];
  }
  return x;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) n += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), d += double(b[i]) * b[i];
  return std::sqrt(n / (d + 1e-30));
}

}  // namespace pl
