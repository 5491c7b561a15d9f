// Kernel benchmark: every CUDA variant of every family at Llama-3.2-1B shapes
// (decode batch 1 / 8 / 64, contexts 512 / 4096; prefill 512 / 2048 tokens),
// plus "gemm ... chain": a decode step's 113 GEMVs replayed as one CUDA graph
// (warm launches, weights far beyond L2; see bench_gemm_chain).
//
// Each iteration flushes L2 (a 256 MB memset, so weights and KV come from HBM
// as in a real step), then times one launch with CUDA events; the reported
// time is the median. Bytes and FLOPs come from the registry's cost functions
// (kernels/costs.h); the roofline is measured in the same run: a 2 GB
// device-to-device cudaMemcpy (bytes read + written) and an 8192^3 bf16
// cublasGemmEx on random data. roof% = max(bytes / BW, flops / PEAK) / time.
//
//   build/<preset>/bench/bench_kernels [--benchmark_filter=gemm] [--benchmark_out=f.json]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/base/cuda_check.h"
#include "kernels/registry.h"

namespace {
using namespace lantern::kernels;

// ------------------------------------------------------------------ device data
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = __float2bfloat16(scale * (float(z >> 40) * (2.0f / 16777216.0f) - 1.0f));
  }
}
__global__ void fill_f32_kernel(float* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = scale * (float(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

uint64_t g_seed = 12345;

// A device allocation filled with random values (never zeros).
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  Dev() = default;
  explicit Dev(size_t b) : bytes(b) {
    if (b) CUDA_CHECK(cudaMalloc(&p, b));
  }
  Dev(Dev&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr, o.bytes = 0; }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    if (p) CUDA_CHECK_LOG(cudaFree(p));
  }
  void grow(size_t b) {
    if (b <= bytes) return;
    if (p) CUDA_CHECK(cudaFree(p));
    p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, b));
    bytes = b;
  }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};
Dev bf16_random(size_t n, float scale = 1.0f) {
  Dev d(n * 2);
  fill_bf16_kernel<<<1024, 256>>>(d.as<__nv_bfloat16>(), n, g_seed += 7919, scale);
  CUDA_CHECK_LAST("fill_bf16_kernel");
  return d;
}
Dev f32_random(size_t n, float scale = 1.0f) {
  Dev d(n * 4);
  fill_f32_kernel<<<1024, 256>>>(d.as<float>(), n, g_seed += 7919, scale);
  CUDA_CHECK_LAST("fill_f32_kernel");
  return d;
}
template <class T>
Dev upload(const std::vector<T>& v) {
  Dev d(v.size() * sizeof(T));
  CUDA_CHECK(cudaMemcpy(d.p, v.data(), d.bytes, cudaMemcpyHostToDevice));
  return d;
}

// ------------------------------------------------------------------ timing
struct Gpu {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Dev flush{size_t(256) << 20};
  Dev workspace;
  double bw = 0, peak = 0;  // measured: bytes/s (read + write), FLOP/s
};
Gpu* g_gpu = nullptr;

struct Row {
  std::string name;
  double us, gbs, tflops, roof;
};
std::vector<Row> g_rows;

void* workspace_for(const KernelEntry& e, const WorkspaceShape& s) {
  const size_t need = e.workspace_bytes ? e.workspace_bytes(s) : 0;
  g_gpu->workspace.grow(need);
  return need ? g_gpu->workspace.p : nullptr;
}

LaunchCtx ctx_for(const KernelEntry& e, const WorkspaceShape& s) {
  LaunchCtx c;
  c.backend = Backend::cuda;
  c.stream = g_gpu->stream;
  c.cublas = g_gpu->cublas;
  c.workspace = workspace_for(e, s);
  c.workspace_bytes = e.workspace_bytes ? e.workspace_bytes(s) : 0;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times `fn` (one launch) with a cold L2 each iteration.
template <class Fn>
double time_cold(benchmark::State& st, Fn&& fn) {
  Gpu& g = *g_gpu;
  fn();  // warm-up: module load, cuBLAS heuristics, attribute setting
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  std::vector<double> us;
  for (auto _ : st) {
    CUDA_CHECK(cudaMemsetAsync(g.flush.p, int(us.size() & 0xff), g.flush.bytes, g.stream));
    CUDA_CHECK(cudaEventRecord(g.start, g.stream));
    fn();
    CUDA_CHECK(cudaEventRecord(g.stop, g.stream));
    CUDA_CHECK(cudaEventSynchronize(g.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
    st.SetIterationTime(ms * 1e-3);
    us.push_back(ms * 1e3);
  }
  return median(us);
}

template <class Args>
void bench_entry(benchmark::State& st, const KernelEntry& e, const Args& args, const WorkspaceShape& shape,
                 const std::string& name) {
  const LaunchCtx ctx = ctx_for(e, shape);
  const double us = time_cold(st, [&] { launch(e, args, ctx); });
  const Cost c = e.cost(&args);
  const double s = us * 1e-6;
  const double floor_s = std::max(c.bytes / g_gpu->bw, c.flops / g_gpu->peak);
  Row r{name, us, c.bytes / s / 1e9, c.flops / s / 1e12, 100.0 * floor_s / s};
  st.counters["us"] = r.us;
  st.counters["GB/s"] = r.gbs;
  st.counters["TFLOP/s"] = r.tflops;
  st.counters["roof%"] = r.roof;
  g_rows.push_back(r);
}

// ------------------------------------------------------------------ GEMV chain
constexpr int kChainLayers = 16;

struct ChainWeights {  // allocated once, shared by every variant's chain
  std::vector<Dev> w;  // per layer: q, k, v, o, gate, up, down; then the LM head
};
ChainWeights& chain_weights();

void bench_gemm_chain(benchmark::State& st, const KernelEntry& e, int m, const std::string& name);

// ------------------------------------------------------------------ model shapes
constexpr int kHidden = 2048, kInter = 8192, kVocab = 128256, kQ = 32, kKv = 8, kHd = 64, kBlock = 16;

std::string vname(const KernelEntry& e) {
  return std::string(family_name(e.family)) + "." + std::to_string(e.variant) + "." + e.name;
}

using Register = std::function<void(const KernelEntry&)>;

void for_cuda(Family f, const Register& reg) {
  for (const KernelEntry* e : Registry::global().variants(f))
    if (e->backend == Backend::cuda) reg(*e);
}

void add(const std::string& name, std::function<void(benchmark::State&)> fn) {
  benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& st) { fn(st); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(25);
}

// The elementwise and small ops: embedding, RMSNorm, RoPE, the KV write.
void register_small_ops() {
  for_cuda(Family::embedding, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev table = bf16_random(size_t(kVocab) * kHidden), out(size_t(n) * kHidden * 2);
        std::vector<int32_t> ids(n);
        for (int i = 0; i < n; ++i) ids[i] = (i * 7919 + 13) % kVocab;
        Dev d_ids = upload(ids);
        bench_entry(st, e, EmbeddingArgs{d_ids.as<int32_t>(), table.p, out.p, n, kHidden, kVocab}, {},
                    vname(e) + " n=" + std::to_string(n));
      });
  });
  for_cuda(Family::rmsnorm, [](const KernelEntry& e) {
    for (int n : {1, 8, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev x = bf16_random(size_t(n) * kHidden, 2.f), w = bf16_random(kHidden), out(size_t(n) * kHidden * 2);
        bench_entry(st, e, RmsnormArgs{x.p, w.p, out.p, nullptr, n, kHidden, 1e-5f}, {},
                    vname(e) + " n=" + std::to_string(n));
      });
  });
  for_cuda(Family::rope, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev q = bf16_random(size_t(n) * kQ * kHd), k = bf16_random(size_t(n) * kKv * kHd);
        std::vector<int32_t> pos(n);
        std::iota(pos.begin(), pos.end(), 100);
        std::vector<float> freq(kHd / 2);
        for (int j = 0; j < kHd / 2; ++j) freq[j] = std::pow(500000.f, -2.f * j / kHd);
        Dev d_pos = upload(pos), d_freq = upload(freq);
        bench_entry(st, e,
                    RopeArgs{q.p, k.p, d_pos.as<int32_t>(), d_freq.as<float>(), n, kQ, kKv, kHd,
                             kQ * kHd, kKv * kHd},
                    {}, vname(e) + " n=" + std::to_string(n));
      });
  });
  for_cuda(Family::kv_write, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        const int max_blocks = 4096 / kBlock, seqs = std::max(n, 1);
        Dev k = bf16_random(size_t(n) * kKv * kHd), v = bf16_random(size_t(n) * kKv * kHd);
        Dev pool(size_t(seqs) * max_blocks * 2 * kBlock * kKv * kHd * 2);
        std::vector<int32_t> tables(size_t(seqs) * max_blocks), pos(n), slots(n);
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
        // decode-like (n <= 64: one token per sequence) or one prefill (512).
        for (int i = 0; i < n; ++i) {
          pos[i] = n > 64 ? i : 700 + i;
          slots[i] = n > 64 ? 0 : i;
        }
        Dev d_t = upload(tables), d_pos = upload(pos), d_slots = upload(slots);
        bench_entry(st, e,
                    KvWriteArgs{k.p, v.p, d_pos.as<int32_t>(), d_slots.as<int32_t>(),
                                KvCacheRef{pool.p, d_t.as<int32_t>(), kBlock, max_blocks, kKv, kHd}, n,
                                kKv * kHd},
                    {}, vname(e) + " n=" + std::to_string(n));
      });
  });
}

// Decode attention over paged contexts, and prefill attention.
void register_attention() {
  for_cuda(Family::attention_decode, [](const KernelEntry& e) {
    const std::pair<int, int> shapes[] = {{1, 512},  {1, 4096},  {1, 32768}, {8, 512},
                                          {8, 4096}, {64, 512},  {64, 4096}, {256, 128},
                                          {256, 256}, {256, 512}};
    for (const auto& shape : shapes) {
      const int b = shape.first, ctx = shape.second;
        add(vname(e) + "/b=" + std::to_string(b) + "/ctx=" + std::to_string(ctx),
            [&e, b, ctx](benchmark::State& st) {
              const int max_blocks = ctx / kBlock;
              Dev q = bf16_random(size_t(b) * kQ * kHd, 2.f), out(size_t(b) * kQ * kHd * 2);
              Dev pool = bf16_random(size_t(b) * max_blocks * 2 * kBlock * kKv * kHd);
              std::vector<int32_t> tables(size_t(b) * max_blocks), slots(b), lens(b, ctx);
              std::iota(tables.begin(), tables.end(), 0);
              std::shuffle(tables.begin(), tables.end(), std::mt19937(2));
              std::iota(slots.begin(), slots.end(), 0);
              Dev d_t = upload(tables), d_slots = upload(slots), d_lens = upload(lens);
              WorkspaceShape ws;
              ws.max_seqs = ws.max_batch_tokens = b;
              ws.max_context = ctx;
              ws.n_q_heads = kQ, ws.n_kv_heads = kKv, ws.head_dim = kHd;
              bench_entry(st, e,
                          AttentionDecodeArgs{q.p, out.p, d_slots.as<int32_t>(), d_lens.as<int32_t>(),
                                              KvCacheRef{pool.p, d_t.as<int32_t>(), kBlock, max_blocks,
                                                         kKv, kHd},
                                              b, ctx, kQ, kQ * kHd, 0.125f, lens.data(), true},
                          ws, vname(e) + " b=" + std::to_string(b) + " ctx=" + std::to_string(ctx));
            });
    }
  });
  for_cuda(Family::attention_prefill, [](const KernelEntry& e) {
    for (int len : {128, 512, 2048, 8192})
      add(vname(e) + "/len=" + std::to_string(len), [&e, len](benchmark::State& st) {
        Dev q = bf16_random(size_t(len) * kQ * kHd, 2.f), out(size_t(len) * kQ * kHd * 2);
        Dev k = bf16_random(size_t(len) * kKv * kHd), v = bf16_random(size_t(len) * kKv * kHd);
        std::vector<int32_t> starts{0, len};
        Dev d_starts = upload(starts);
        WorkspaceShape ws;
        ws.max_seqs = 1, ws.max_batch_tokens = ws.max_seq_len = len;
        ws.n_q_heads = kQ, ws.n_kv_heads = kKv, ws.head_dim = kHd;
        bench_entry(st, e,
                    AttentionPrefillArgs{q.p, k.p, v.p, out.p, d_starts.as<int32_t>(), starts.data(),
                                         1, len, kQ, kKv, kHd, kQ * kHd, kKv * kHd, 0.125f},
                    ws, vname(e) + " len=" + std::to_string(len));
      });
  });
}

// SwiGLU, the residual add and the fused op table's small kernels.
void register_fused_small() {
  for_cuda(Family::swiglu, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev g = bf16_random(size_t(n) * kInter, 4.f), u = bf16_random(size_t(n) * kInter),
            out(size_t(n) * kInter * 2);
        bench_entry(st, e, SwigluArgs{g.p, u.p, out.p, n, kInter}, {}, vname(e) + " n=" + std::to_string(n));
      });
  });
  for_cuda(Family::residual, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev x = bf16_random(size_t(n) * kHidden), y = bf16_random(size_t(n) * kHidden);
        bench_entry(st, e, ResidualArgs{x.p, y.p, size_t(n) * kHidden}, {},
                    vname(e) + " n=" + std::to_string(n));
      });
  });
  // The fused op table's kernels (docs/engine.md, Fusion).
  for_cuda(Family::add_rmsnorm, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        Dev x = bf16_random(size_t(n) * kHidden), y = bf16_random(size_t(n) * kHidden), w = bf16_random(kHidden),
            out(size_t(n) * kHidden * 2);
        bench_entry(st, e, AddRmsnormArgs{x.p, y.p, w.p, out.p, n, kHidden, 1e-5f}, {},
                    vname(e) + " n=" + std::to_string(n));
      });
  });
  for_cuda(Family::rope_kv_write, [](const KernelEntry& e) {
    for (int n : {1, 64, 512})
      add(vname(e) + "/n=" + std::to_string(n), [&e, n](benchmark::State& st) {
        const int max_blocks = 4096 / kBlock, seqs = std::max(n, 1), stride = (kQ + 2 * kKv) * kHd;
        Dev qkv = bf16_random(size_t(n) * stride), q_out(size_t(n) * kQ * kHd * 2);
        Dev pool(size_t(seqs) * max_blocks * 2 * kBlock * kKv * kHd * 2);
        std::vector<int32_t> tables(size_t(seqs) * max_blocks), pos(n), slots(n);
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
        for (int i = 0; i < n; ++i) {  // as kv_write's: decode-like up to 64, one prefill at 512
          pos[i] = n > 64 ? i : 700 + i;
          slots[i] = n > 64 ? 0 : i;
        }
        std::vector<float> freq(kHd / 2);
        for (int j = 0; j < kHd / 2; ++j) freq[j] = std::pow(500000.f, -2.f * j / kHd);
        Dev d_t = upload(tables), d_pos = upload(pos), d_slots = upload(slots), d_freq = upload(freq);
        bench_entry(st, e,
                    RopeKvWriteArgs{qkv.p, q_out.p, d_pos.as<int32_t>(), d_slots.as<int32_t>(), d_freq.as<float>(),
                                    KvCacheRef{pool.p, d_t.as<int32_t>(), kBlock, max_blocks, kKv, kHd}, n, kQ,
                                    stride},
                    {}, vname(e) + " n=" + std::to_string(n));
      });
  });
}

// The projections: q/k/v with RoPE, the GEMMs, gate/up with SwiGLU, the GEMV chain.
void register_projections() {
  // The q/k/v projection with RoPE and the KV write (decode steps' qkv_rope):
  // decode batches 1 / 8 / 16 (the fused GEMV) and 64 (both variants unfused).
  for_cuda(Family::qkv_rope, [](const KernelEntry& e) {
    for (int m : {1, 8, 16, 64})
      add(vname(e) + "/m=" + std::to_string(m), [&e, m](benchmark::State& st) {
        const int max_blocks = 4096 / kBlock, cols = (kQ + 2 * kKv) * kHd;
        Dev a = bf16_random(size_t(m) * kHidden), w = bf16_random(size_t(cols) * kHidden),
            qkv(size_t(m) * cols * 2), q_out(size_t(m) * kQ * kHd * 2);
        Dev pool(size_t(m) * max_blocks * 2 * kBlock * kKv * kHd * 2);
        std::vector<int32_t> tables(size_t(m) * max_blocks), pos(m), slots(m);
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
        for (int i = 0; i < m; ++i) pos[i] = 700 + i, slots[i] = i;
        std::vector<float> freq(kHd / 2);
        for (int j = 0; j < kHd / 2; ++j) freq[j] = std::pow(500000.f, -2.f * j / kHd);
        Dev d_t = upload(tables), d_pos = upload(pos), d_slots = upload(slots), d_freq = upload(freq);
        bench_entry(st, e,
                    QkvRopeArgs{a.p, w.p, qkv.p, q_out.p, d_pos.as<int32_t>(), d_slots.as<int32_t>(),
                                d_freq.as<float>(), KvCacheRef{pool.p, d_t.as<int32_t>(), kBlock, max_blocks, kKv, kHd},
                                m, kHidden, kQ},
                    {}, vname(e) + " m=" + std::to_string(m));
      });
  });
  struct GemmShape {
    const char* what;
    int n, k;
    bool f32;
  };
  for_cuda(Family::gemm, [](const KernelEntry& e) {
    // The fused op table's qkv and gate_up, o (= unfused q), the unfused k/v and
    // gate/up, down and the fp32 LM head; decode batches 1/8/32/64/128/256, prefill 512.
    for (GemmShape s : {GemmShape{"qkv", 3072, 2048, false}, {"o", 2048, 2048, false},
                        {"kv", 512, 2048, false}, {"gate_up", 16384, 2048, false},
                        {"gate", 8192, 2048, false}, {"down", 2048, 8192, false},
                        {"lm_head", kVocab, 2048, true}})
      for (int m : {1, 8, 32, 64, 128, 256, 512})
        add(vname(e) + "/" + s.what + "/m=" + std::to_string(m), [&e, s, m](benchmark::State& st) {
          Dev a = bf16_random(size_t(m) * s.k), w = bf16_random(size_t(s.n) * s.k),
              c(size_t(m) * s.n * (s.f32 ? 4 : 2));
          bench_entry(st, e, GemmArgs{a.p, w.p, c.p, m, s.n, s.k, s.f32}, {},
                      vname(e) + " " + s.what + " m=" + std::to_string(m));
        });
  });
  // The MLP's gate/up projection with SwiGLU (inter 8192, k 2048) at decode
  // batches 64 / 128 / 256 and prefill chunks 512 / 1024 / 2048.
  for_cuda(Family::gate_up_swiglu, [](const KernelEntry& e) {
    for (int m : {64, 128, 256, 512, 1024, 2048})
      add(vname(e) + "/m=" + std::to_string(m), [&e, m](benchmark::State& st) {
        Dev a = bf16_random(size_t(m) * kHidden), w = bf16_random(size_t(2) * kInter * kHidden),
            out(size_t(m) * kInter * 2), scratch(size_t(m) * 2 * kInter * 2);
        bench_entry(st, e, GateUpSwigluArgs{a.p, w.p, out.p, scratch.p, m, kInter, kHidden}, {},
                    vname(e) + " m=" + std::to_string(m));
      });
  });
  // A decode step's GEMVs as the engine runs them: 16 layers of q, k, v, o, gate,
  // up, down (distinct weights, 1.86 GB, far beyond L2) and the fp32 LM head,
  // each reading an earlier one's output, captured once as a CUDA graph and
  // replayed. Measures what single cold launches cannot: launch gaps, ramp-up
  // and drain between back-to-back GEMVs, and programmatic dependent launch.
  for_cuda(Family::gemm, [](const KernelEntry& e) {
    for (int m : {1, 8, 16, 64})
      add(vname(e) + "/chain/m=" + std::to_string(m), [&e, m](benchmark::State& st) {
        bench_gemm_chain(st, e, m, vname(e) + " chain m=" + std::to_string(m));
      });
  });
}

// Greedy and sampled token selection.
void register_sampling() {
  for_cuda(Family::argmax, [](const KernelEntry& e) {
    for (int b : {1, 8, 64})
      add(vname(e) + "/b=" + std::to_string(b), [&e, b](benchmark::State& st) {
        Dev logits = f32_random(size_t(b) * kVocab, 8.f), out(size_t(b) * 4);
        WorkspaceShape ws;
        ws.max_seqs = ws.max_batch_tokens = b;
        ws.vocab = kVocab;
        bench_entry(st, e, ArgmaxArgs{logits.as<float>(), out.as<int32_t>(), b, kVocab}, ws,
                    vname(e) + " b=" + std::to_string(b));
      });
  });
  for_cuda(Family::sample, [](const KernelEntry& e) {
    for (int b : {1, 8, 64, 256})
      for (int top_k : {50, 0})
        add(vname(e) + "/b=" + std::to_string(b) + "/top_k=" + std::to_string(top_k),
            [&e, b, top_k](benchmark::State& st) {
              Dev logits = f32_random(size_t(b) * kVocab, 8.f), out(size_t(b) * 4);
              std::vector<float> t(b, 0.8f), p(b, top_k ? 0.9f : 0.95f);
              std::vector<int32_t> k(b, top_k), steps(b, 3);
              std::vector<uint64_t> seeds(b);
              std::iota(seeds.begin(), seeds.end(), 42);
              Dev d_t = upload(t), d_p = upload(p), d_k = upload(k), d_steps = upload(steps),
                  d_seeds = upload(seeds);
              WorkspaceShape ws;
              ws.max_seqs = ws.max_batch_tokens = b;
              ws.vocab = kVocab;
              bench_entry(st, e,
                          SampleArgs{logits.as<float>(), d_t.as<float>(), d_k.as<int32_t>(),
                                     d_p.as<float>(), d_seeds.as<uint64_t>(), d_steps.as<int32_t>(),
                                     out.as<int32_t>(), b, kVocab},
                          ws, vname(e) + " b=" + std::to_string(b) + " top_k=" + std::to_string(top_k));
            });
  });
}

void register_all() {
  register_small_ops();
  register_attention();
  register_fused_small();
  register_projections();
  register_sampling();
}

// ------------------------------------------------------------------ GEMV chain (definitions)
ChainWeights& chain_weights() {
  static ChainWeights* cw = [] {
    auto* c = new ChainWeights;
    for (int l = 0; l < kChainLayers; ++l) {
      c->w.push_back(bf16_random(size_t(kHidden) * kHidden));    // q
      c->w.push_back(bf16_random(size_t(kKv * kHd) * kHidden));  // k
      c->w.push_back(bf16_random(size_t(kKv * kHd) * kHidden));  // v
      c->w.push_back(bf16_random(size_t(kHidden) * kHidden));    // o
      c->w.push_back(bf16_random(size_t(kInter) * kHidden));     // gate
      c->w.push_back(bf16_random(size_t(kInter) * kHidden));     // up
      c->w.push_back(bf16_random(size_t(kHidden) * kInter));     // down
    }
    c->w.push_back(bf16_random(size_t(kVocab) * kHidden));  // LM head
    return c;
  }();
  return *cw;
}

void bench_gemm_chain(benchmark::State& st, const KernelEntry& e, int m, const std::string& name) {
  Gpu& g = *g_gpu;
  ChainWeights& cw = chain_weights();
  Dev x = bf16_random(size_t(m) * kHidden), q(size_t(m) * kHidden * 2),
      k(size_t(m) * kKv * kHd * 2), v(size_t(m) * kKv * kHd * 2), o(size_t(m) * kHidden * 2),
      gate(size_t(m) * kInter * 2), up(size_t(m) * kInter * 2), down(size_t(m) * kHidden * 2),
      logits(size_t(m) * kVocab * 4);
  std::vector<GemmArgs> calls;
  for (int l = 0; l < kChainLayers; ++l) {
    const Dev* w = &cw.w[size_t(l) * 7];
    calls.push_back({x.p, w[0].p, q.p, m, kHidden, kHidden});
    calls.push_back({x.p, w[1].p, k.p, m, kKv * kHd, kHidden});
    calls.push_back({x.p, w[2].p, v.p, m, kKv * kHd, kHidden});
    calls.push_back({q.p, w[3].p, o.p, m, kHidden, kHidden});
    calls.push_back({o.p, w[4].p, gate.p, m, kInter, kHidden});
    calls.push_back({o.p, w[5].p, up.p, m, kInter, kHidden});
    calls.push_back({gate.p, w[6].p, down.p, m, kHidden, kInter});
  }
  calls.push_back({down.p, cw.w.back().p, logits.p, m, kVocab, kHidden, true});
  const LaunchCtx ctx = ctx_for(e, {});
  double bytes = 0;
  for (const GemmArgs& a : calls) bytes += e.cost(&a).bytes;
  for (const GemmArgs& a : calls) launch(e, a, ctx);  // warm-up outside capture (cuBLAS heuristics)
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  for (const GemmArgs& a : calls) launch(e, a, ctx);
  CUDA_CHECK(cudaStreamEndCapture(g.stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, g.stream));
  std::vector<double> us;
  for (auto _ : st) {
    CUDA_CHECK(cudaEventRecord(g.start, g.stream));
    CUDA_CHECK(cudaGraphLaunch(exec, g.stream));
    CUDA_CHECK(cudaEventRecord(g.stop, g.stream));
    CUDA_CHECK(cudaEventSynchronize(g.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
    st.SetIterationTime(ms * 1e-3);
    us.push_back(ms * 1e3);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  const double t = median(us), s = t * 1e-6;
  Row r{name, t, bytes / s / 1e9, 0, 100.0 * (bytes / g.bw) / s};
  st.counters["us"] = r.us;
  st.counters["GB/s"] = r.gbs;
  st.counters["roof%"] = r.roof;
  g_rows.push_back(r);
}

// ------------------------------------------------------------------ roofline
void measure_roofline(Gpu& g) {
  const size_t copy_bytes = size_t(2) << 30;
  Dev src = bf16_random(copy_bytes / 2), dst(copy_bytes);
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    CUDA_CHECK(cudaEventRecord(g.start, g.stream));
    CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, copy_bytes, cudaMemcpyDeviceToDevice, g.stream));
    CUDA_CHECK(cudaEventRecord(g.stop, g.stream));
    CUDA_CHECK(cudaEventSynchronize(g.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
    if (i >= 2) t.push_back(ms * 1e-3);
  }
  g.bw = 2.0 * copy_bytes / median(t);
  const int n = 8192;
  Dev a = bf16_random(size_t(n) * n), b = bf16_random(size_t(n) * n), c(size_t(n) * n * 2);
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(g.cublas, g.stream));
  t.clear();
  for (int i = 0; i < 12; ++i) {
    CUDA_CHECK(cudaEventRecord(g.start, g.stream));
    CUBLAS_CHECK(cublasGemmEx(g.cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p,
                              CUDA_R_16BF, n, &zero, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaEventRecord(g.stop, g.stream));
    CUDA_CHECK(cudaEventSynchronize(g.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
    if (i >= 2) t.push_back(ms * 1e-3);
  }
  g.peak = 2.0 * n * double(n) * n / median(t);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_kernels: no CUDA GPU, nothing to measure\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  Gpu gpu;
  g_gpu = &gpu;
  CUDA_CHECK(cudaStreamCreate(&gpu.stream));
  CUBLAS_CHECK(cublasCreate(&gpu.cublas));
  CUDA_CHECK(cudaEventCreate(&gpu.start));
  CUDA_CHECK(cudaEventCreate(&gpu.stop));
  measure_roofline(gpu);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; measured roofline: copy %.0f GB/s (read+write), bf16 GEMM %.0f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, gpu.bw / 1e9, gpu.peak / 1e12);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\n%-48s %10s %9s %9s %7s\n", "kernel shape", "median_us", "GB/s", "TFLOP/s", "roof%");
  for (const Row& r : g_rows)
    std::printf("%-48s %10.2f %9.1f %9.2f %7.1f\n", r.name.c_str(), r.us, r.gbs, r.tflops, r.roof);
  benchmark::Shutdown();
  return 0;
}
