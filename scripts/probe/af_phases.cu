// Phase probe for attention_prefill.4 wg_flash (docs/performance.md, session 29):
// includes kernels/cuda/sm90a/attention_prefill_wgmma.cu with LANTERN_AF_PROBE
// defined, so every block stamps %globaltimer at entry, after the PDL wait and
// its sequence's bounds, after the barrier init, at Q full, at its first key
// tile full, after each warpgroup's last tile, after the merge barrier and at
// exit (and records its SM and key tiles). The engine's layout: q, k, v are
// column views of one [tokens, 3072] qkv buffer (32 q / 8 kv heads, head_dim 64).
// Per length and mode it prints the event time, the blocks' span, quantiles over
// blocks of each stamp (µs after the first block's entry) and the last block
// to finish, stamp by stamp.
//   modes: cold (256 MB L2 flush before each launch), warm (the inputs just
//          written, as in a step), chain (three launches back to back with PDL;
//          the last one's stamps: its blocks wait on the previous launch)
//   build: bash scripts/probe/build-probe.sh af_phases; run: build/probe/af_phases [len/mode ...]
//   e.g.   build/probe/af_phases 512/warm 512/chain 2048/warm
//   LANTERN_AF_PIPE=1 in the environment probes variant 5's pipelined kernel instead;
//   LANTERN_PREFILL_BALANCE=1 the balanced block order (session 32).
#define LANTERN_AF_PROBE 1
#include "kernels/cuda/sm90a/attention_prefill_wgmma.cu"
#include "scripts/probe/probe_common.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace afprobe {
using probe::fill_bf16;
using probe::quantile;
using namespace lantern;
using namespace lantern::kernels;
using lantern::kernels::af_detail::g_af_probe;

constexpr int kSlots = 12, kTimeSlots = 9;
const char* const kNames[kTimeSlots] = {"entry",      "pdl+bounds", "bar_init",   "q_full", "tile0_full",
                                        "wg0_done",   "wg1_done",   "merge_sync", "exit"};

// The stamps of the launches of one case: per launch, quantiles over blocks of
// each stamp and the last block's stamps (µs after the first block's entry).
struct Phases {
  std::vector<double> ev, spans, last_tiles, sm_tiles_max, sm_tiles_mean;  // key tiles of an SM's blocks
  std::vector<std::vector<double>> q10{kTimeSlots}, q50{kTimeSlots}, q90{kTimeSlots}, qmax{kTimeSlots};
  std::vector<std::vector<double>> last{kTimeSlots};  // the last block to exit, per stamp
  int blocks = 0, per_sm_max = 0, sms_used = 0;

  void add(const unsigned long long (*pr)[kSlots], int grid) {
    blocks = 0;
    unsigned long long t0 = ~0ull, tend = 0;
    int last_b = -1;
    for (int b = 0; b < grid && b < 4096; ++b) {
      if (pr[b][0] == 0) continue;
      ++blocks;
      t0 = std::min(t0, pr[b][0]);
      if (pr[b][8] > tend) tend = pr[b][8], last_b = b;
    }
    spans.push_back((tend - t0) / 1000.0);
    for (int s = 0; s < kTimeSlots; ++s) {
      std::vector<double> v;
      for (int b = 0; b < grid && b < 4096; ++b)
        if (pr[b][s] != 0) v.push_back((double(pr[b][s]) - double(t0)) / 1000.0);
      q10[s].push_back(quantile(v, 0.1));
      q50[s].push_back(quantile(v, 0.5));
      q90[s].push_back(quantile(v, 0.9));
      qmax[s].push_back(quantile(v, 1.0));
      if (last_b >= 0) last[s].push_back(pr[last_b][s] ? (double(pr[last_b][s]) - double(t0)) / 1000.0 : -1.0);
    }
    if (last_b >= 0) last_tiles.push_back(double(pr[last_b][10]));
    std::vector<int> per(256, 0), tiles(256, 0);
    for (int b = 0; b < grid && b < 4096; ++b)
      if (pr[b][0] != 0) per[pr[b][9] & 255]++, tiles[pr[b][9] & 255] += int(pr[b][10]);
    per_sm_max = 0, sms_used = 0;
    int tiles_max = 0, tiles_sum = 0;
    for (int sm = 0; sm < 256; ++sm) {
      per_sm_max = std::max(per_sm_max, per[sm]), sms_used += per[sm] > 0;
      tiles_max = std::max(tiles_max, tiles[sm]), tiles_sum += tiles[sm];
    }
    sm_tiles_max.push_back(tiles_max);
    sm_tiles_mean.push_back(sms_used ? double(tiles_sum) / sms_used : 0.0);
  }

  void print(int len, const std::string& mode) const {
    std::printf("== %d tokens, %s: %d blocks on %d SMs (<= %d per SM; key tiles per SM: max %.0f, mean %.1f); "
                "event %.2f us per launch, block span %.2f us (medians of %zu)\n",
                len, mode.c_str(), blocks, sms_used, per_sm_max, quantile(sm_tiles_max, 0.5),
                quantile(sm_tiles_mean, 0.5), quantile(ev, 0.5), quantile(spans, 0.5), ev.size());
    std::printf("   %-11s %8s %8s %8s %8s %10s   (us after the first block's entry; quantiles over blocks; last: "
                "the block that exits last, %.0f key tiles)\n",
                "stamp", "p10", "p50", "p90", "max", "last", quantile(last_tiles, 0.5));
    for (int s = 0; s < kTimeSlots; ++s)
      std::printf("   %-11s %8.2f %8.2f %8.2f %8.2f %10.2f\n", kNames[s], quantile(q10[s], 0.5),
                  quantile(q50[s], 0.5), quantile(q90[s], 0.5), quantile(qmax[s], 0.5), quantile(last[s], 0.5));
  }
};

void run(int len, const std::string& mode, void* flush, size_t flush_bytes, cudaStream_t st) {
  constexpr int kQ = 32, kKv = 8, kHd = 64, kStride = (kQ + 2 * kKv) * kHd;
  __nv_bfloat16 *qkv, *out;
  int32_t* starts;
  CK(cudaMalloc(&qkv, size_t(len) * kStride * 2));
  CK(cudaMalloc(&out, size_t(len) * kStride * 2));
  CK(cudaMalloc(&starts, 2 * sizeof(int32_t)));
  const int32_t host_starts[2] = {0, len};
  CK(cudaMemcpy(starts, host_starts, sizeof host_starts, cudaMemcpyHostToDevice));
  fill_bf16<<<264, 256, 0, st>>>(qkv, size_t(len) * kStride, 7, 1.f);
  LaunchCtx ctx;
  ctx.backend = Backend::cuda;
  ctx.stream = st;
  AttentionPrefillArgs a{qkv,         qkv + kQ * kHd, qkv + (kQ + kKv) * kHd, out, starts, host_starts, 1, len,
                         kQ,          kKv,            kHd,                    kStride, kStride, 0.125f};
  static const bool pipelined = env_int("LANTERN_AF_PIPE", 0) != 0;
  auto launch = [&] {
    if (!attention_prefill_wg_launch(a, ctx, pipelined)) {
      std::fprintf(stderr, "wg_flash does not fit\n");
      std::exit(1);
    }
  };
  launch();
  CK(cudaStreamSynchronize(st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  constexpr int kReps = 25;
  Phases ph;
  static unsigned long long zero[4096][kSlots], pr[4096][kSlots];
  for (int r = 0; r < kReps; ++r) {
    if (mode == "cold") CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, st));
    if (mode == "warm") fill_bf16<<<264, 256, 0, st>>>(qkv, size_t(len) * kStride, 7 + r, 1.f);
    CK(cudaMemcpyToSymbolAsync(g_af_probe, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, st));
    CK(cudaEventRecord(e0, st));
    if (mode == "chain")
      launch(), launch(), launch();  // the stamps are the third's (each block overwrites its row)
    else
      launch();
    CK(cudaEventRecord(e1, st));
    CK(cudaStreamSynchronize(st));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ph.ev.push_back(ms * 1000.0 / (mode == "chain" ? 3 : 1));
    CK(cudaMemcpyFromSymbol(pr, g_af_probe, sizeof(pr)));
    ph.add(pr, ((len + 63) / 64) * kQ);
  }
  ph.print(len, mode);
  CK(cudaFree(qkv));
  CK(cudaFree(out));
  CK(cudaFree(starts));
}
}  // namespace afprobe

int main(int argc, char** argv) {
  std::vector<std::string> want(argv + 1, argv + argc);
  if (want.empty()) want = {"512/warm", "512/chain", "512/cold", "2048/warm"};
  cudaStream_t st;
  if (cudaStreamCreate(&st) != cudaSuccess) return 1;
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) return 1;
  for (const auto& s : want) {
    const auto slash = s.find('/');
    const int len = std::atoi(s.c_str());
    const std::string mode = slash == std::string::npos ? "warm" : s.substr(slash + 1);
    if (len <= 0 || len > 8192 || (mode != "warm" && mode != "cold" && mode != "chain")) {
      std::fprintf(stderr, "bad case '%s': LEN/MODE with LEN 1..8192 and MODE warm|cold|chain\n", s.c_str());
      return 2;
    }
    afprobe::run(len, mode, flush, flush_bytes, st);
  }
  return 0;
}
