// Probe (issue 14, session 35): can a persistent decode kernel run a Llama-3.2-1B
// layer's weight streams back to back, with grid-wide barriers in place of kernel
// boundaries, near the bandwidth floor? The batch-1 step's remaining gap is the
// boundaries between the weight streams (docs/performance.md, session 34), so this
// is the measurement a per-layer persistent kernel has to pass first.
//
// One row (batch 1), 16 layers of random bf16 weights (1.95 GB: every layer comes
// from HBM), hidden 2048, q 2048, k/v 512 each, intermediate 8192. A layer is five
// phases, each spread over every block (rows of the phase's weight matrix split
// evenly by block, then by warp; one warp per output row, 16-byte loads):
//   1 qkv   = W_qkv . rmsnorm(x)           (every block normalises x itself)
//   2 attention over CTX keys of a static cache per layer (no RoPE, no KV write):
//                                           8 kv heads x SPLITS units, one block
//                                           each, writing flash-decoding partials;
//                                           CTX=0: a stand-in (32 blocks copy q)
//   3 x    += W_o . attn                   (every block combines the partials
//                                            itself; the warp owning a row adds it)
//   4 act   = silu(W_g . h) * (W_u . h),   h = rmsnorm(x)
//   5 x    += W_d . act
// Modes (each timed as the median of 20 launches of all 16 layers, CUDA events):
//   persistent      one cooperative kernel, a counter barrier after each phase
//   persistent+pf   the same; before each barrier every warp asks the L2 for the
//                   first PF bytes of its next phase's rows (cp.async.bulk.prefetch)
//   chain           one kernel per phase (the same device code), programmatic
//                   dependent launch, 80 launches captured in one CUDA graph
//   chain+pf        the same with the L2 prefetch before griddepcontrol.wait
//   ring            the ring kernel (below), 2-5 stages; "no dot products": its consumers
//                   only wait for and release the stages (the copy stream alone)
//   stream          the persistent kernel without barriers (the results are
//                   wrong; the time is the weight stream's floor in this code)
//   dynamic rows    the persistent kernel with rows taken in chunks from a counter
//                   per (layer, phase) instead of a fixed slice per block
//   balanced        o_proj and down as k-quarter units split evenly over the blocks,
//                   added into x by fp32 atomics (the persistent kernel and the chain)
//   per-group       (CTX > 0, SPLITS 16) kv group g's q/k/v rows made by 16 blocks of
//                   their own, its attention units waiting on those 16 (4 global syncs)
//   split barrier   the barrier in halves: arrive, then the next phase's L2 prefetch,
//                   then wait (loads after the arrival cannot hold its release back)
//   register carry  the split barrier, and between its halves every warp loads its
//                   first row of the next weight phase into registers (session 36)
//   fused3          three syncs a layer instead of five (CTX=0 only; see fused3_kernel)
//   barriers        the persistent kernel without work (80 barriers alone)
// Last, stamped launches (%globaltimer per block and phase): a sync's skew and release.
// Sessions 35-36 (docs/performance.md): a sync costs ~1.75-2 us of stream per phase.
// Checks: every form bit-identical to persistent (or within its bound), 2 layers vs a CPU reference.
//   bash scripts/probe/build-probe.sh persistent_layer && CTX=512 SPLITS=16 build/probe/persistent_layer [PF_BYTES...]
// (CTX default 512, SPLITS default 16; PF_BYTES default 2048 4096)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "persistent_layer_device.cuh"
#include "persistent_layer_host.h"
#include "persistent_layer_phases.cuh"
#include "persistent_layer_ring.cuh"
#include "probe_common.cuh"

namespace pl {

template <int CF>
__global__ void __launch_bounds__(kThreads, 1) persistent_kernel(Params p) {
  __shared__ __align__(16) Smem s;
  const int warp = threadIdx.x >> 5;
  constexpr bool kSplitBarrier = (CF & (kSplit | kCarry)) != 0;
  unsigned gen = 0;
  uint4 pre[8] = {};  // kCarry: the warp's first row of the next weight phase
  bool have = false;
  if constexpr ((CF & kCarry) != 0) have = (p.flags & kWork) && carry_load(p, 0, 0, pre);
  for (int layer = 0; layer < p.n_layers; ++layer) {
    for (int phase = 0; phase < kPhases; ++phase) {
      stamp(p, layer, phase, 0);
      if (p.flags & kWork) run_phase<CF>(p, s, layer, phase, pre, have);
      if (p.flags & kStamp) __syncthreads();
      stamp(p, layer, phase, 1);
      const int nl = phase + 1 < kPhases ? layer : layer + 1, np = (phase + 1) % kPhases;
      if constexpr (kSplitBarrier) {  // arrive, then the next phase's loads, then wait
        if (p.flags & kBarrier) grid_arrive(p.counter);
        prefetch_phase(p, nl, np, warp);
        if constexpr ((CF & kCarry) != 0)
          if ((p.flags & kWork) && np != 2) have = carry_load(p, nl, carry_phase(np), pre);
        if (p.flags & kBarrier) grid_wait(p.counter, p.epoch + ++gen * gridDim.x);
        else __syncthreads();
        continue;
      }
      prefetch_phase(p, nl, np, warp);
      // kGroup: the attention waits on its group's counter instead (qkv_by_group).
      if ((p.flags & kBarrier) && !((CF & kGroup) != 0 && phase == 0))
        grid_barrier(p.counter, p.epoch + ++gen * gridDim.x);
      else __syncthreads();
    }
  }
}

template <int CF>
__global__ void __launch_bounds__(kThreads, 1) phase_kernel(Params p, int layer, int phase) {
  __shared__ __align__(16) Smem s;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  prefetch_phase(p, layer, phase, threadIdx.x >> 5);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp(p, layer, phase, 0);
  const uint4 none[8] = {};
  run_phase<CF>(p, s, layer, phase, none, false);
  if (p.flags & kStamp) __syncthreads();
  stamp(p, layer, phase, 1);
}

}  // namespace pl

namespace {
using namespace pl;

// ---- host ----

unsigned g_epoch = 0;  // arrivals on the counter so far (every persistent launch with barriers adds its own)

struct Runner {
  Params p{};
  int blocks = 0;
  cudaStream_t st{};
  std::vector<float> x0;
  cudaGraphExec_t chain_exec[3] = {nullptr, nullptr, nullptr};  // without / with prefetch

  void reset_x() { CK(cudaMemcpyAsync(p.x, x0.data(), H * 4, cudaMemcpyHostToDevice, st)); }

  void launch_persistent(int flags, int pf) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.pf_bytes = pf;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * (kPhases - ((flags & kGroup) ? 1 : 0)) * blocks);
    if (flags & kDynamic) CK(cudaMemsetAsync(q.dyn, 0, sizeof(unsigned) * p.n_layers * kPhases, st));
    if (flags & kGroup) CK(cudaMemsetAsync(q.group_ctr, 0, sizeof(unsigned) * p.n_layers * 8, st));
    void* args[] = {&q};
    const int cf = flags & (kDynamic | kGroup | kBalanced | kSplit | kCarry);
    void* k = nullptr;
    switch (cf) {  // one mode at a time
      case 0: k = reinterpret_cast<void*>(persistent_kernel<0>); break;
      case kDynamic: k = reinterpret_cast<void*>(persistent_kernel<kDynamic>); break;
      case kGroup: k = reinterpret_cast<void*>(persistent_kernel<kGroup>); break;
      case kBalanced: k = reinterpret_cast<void*>(persistent_kernel<kBalanced>); break;
      case kSplit: k = reinterpret_cast<void*>(persistent_kernel<kSplit>); break;
      case kCarry: k = reinterpret_cast<void*>(persistent_kernel<kCarry>); break;
      default: std::abort();
    }
    CK(cudaLaunchCooperativeKernel(k, dim3(blocks), dim3(kThreads), args, 0, st));
  }

  void launch_fused3(int flags) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * 3 * blocks);
    CK(cudaMemcpyAsync(q.xb[0], x0.data(), H * 4, cudaMemcpyHostToDevice, st));
    void* args[] = {&q};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(fused3_kernel), dim3(blocks), dim3(kThreads), args, 0, st));
  }

  void launch_ring(int flags, int stages) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.stages = stages;
    q.pf_bytes = 0;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * kPhases * blocks);
    void* args[] = {&q};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ring_kernel), dim3(blocks), dim3(kRingThreads), args,
                                   ring_smem_bytes(stages), st));
  }

  cudaGraphExec_t build_chain(int pf, int extra_flags = 0) {
    Params q = p;
    q.flags = kWork | extra_flags;
    q.pf_bytes = pf;
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < p.n_layers; ++l)
      for (int ph = 0; ph < kPhases; ++ph) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr = {};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(kThreads);
        cfg.stream = st;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        if (extra_flags & kBalanced) CK(cudaLaunchKernelEx(&cfg, phase_kernel<kBalanced>, q, l, ph));
        else CK(cudaLaunchKernelEx(&cfg, phase_kernel<0>, q, l, ph));
      }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
  }

  template <class Fn>
  double time_us(Fn&& fn) {
    return probe::event_median_us(st, 3, 20, fn);
  }

  std::vector<float> read_x() {
    std::vector<float> h(H);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(h.data(), p.x, H * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

// The kernels' resources; false if one does not fit one block per SM.
bool print_kernels(int sms, const char* name) {
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<0>, kThreads, 0));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, persistent_kernel<0>));
  std::printf("device %s, %d SMs; persistent kernel: %d threads, %d registers, %zu B shared, %d block(s)/SM\n", name,
              sms, kThreads, fa.numRegs, fa.sharedSizeBytes, per_sm);
  if (per_sm < 1) return std::printf("the persistent kernel does not fit one block per SM\n"), false;
  CK(cudaFuncGetAttributes(&fa, persistent_kernel<kCarry>));
  std::printf("persistent kernel with the register carry: %d registers, %zu B local\n", fa.numRegs, fa.localSizeBytes);
  CK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem_bytes(kMaxStages))));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_kernel, kRingThreads, ring_smem_bytes(kMaxStages)));
  std::printf("ring kernel: %d threads (16 consumer warps, 1 producer), %zu B shared at %d stages, %d block(s)/SM\n",
              kRingThreads, ring_smem_bytes(kMaxStages), kMaxStages, per_sm);
  if (per_sm < 1) return std::printf("the ring kernel does not fit one block per SM\n"), false;
  return true;
}

// The runner's buffers, the transposed down weights (fused3) and the cache (CTX > 0);
// false when CTX / SPLITS do not fit.
bool setup(Runner& R, const Model& m, int n_layers) {
  CK(cudaStreamCreateWithFlags(&R.st, cudaStreamNonBlocking));
  R.p.layers = m.dev;
  R.p.n_layers = n_layers;
  for (float** b : {&R.p.x, &R.p.xb[0], &R.p.xb[1], &R.p.mid}) CK(cudaMalloc(b, H * 4));
  CK(cudaMalloc(&R.p.qkv, QKV * 4));
  CK(cudaMalloc(&R.p.attn, QD * 4));
  CK(cudaMalloc(&R.p.act, I * 4));
  CK(cudaMalloc(&R.p.counter, 4));
  CK(cudaMemset(R.p.counter, 0, 4));
  CK(cudaMalloc(&R.p.dyn, sizeof(unsigned) * n_layers * kPhases));
  CK(cudaMalloc(&R.p.group_ctr, sizeof(unsigned) * n_layers * 8));
  CK(cudaMalloc(&R.p.stamps, sizeof(unsigned long long) * n_layers * kPhases * R.blocks * 2));
  std::vector<const __nv_bfloat16*> dts;
  for (int l = 0; l < n_layers; ++l) {
    __nv_bfloat16* t;
    CK(cudaMalloc(&t, size_t(I) * H * 2));
    transpose_bf16<<<1024, 256>>>(m.host[l].d, t, H, I);
    dts.push_back(t);
  }
  const __nv_bfloat16** d;
  CK(cudaMalloc(&d, sizeof(void*) * n_layers));
  CK(cudaMemcpy(d, dts.data(), sizeof(void*) * n_layers, cudaMemcpyHostToDevice));
  R.p.dT = d;
  R.p.ctx = std::getenv("CTX") ? std::atoi(std::getenv("CTX")) : 512;
  R.p.splits = std::getenv("SPLITS") ? std::atoi(std::getenv("SPLITS")) : 16;
  if (R.p.ctx > 0) {
    if (R.p.splits < 1 || 8 * R.p.splits > R.blocks || (R.p.ctx + R.p.splits - 1) / R.p.splits > 128)
      return std::printf("CTX %d / SPLITS %d: need 8 x splits <= %d blocks and <= 128 keys a split\n", R.p.ctx,
                         R.p.splits, R.blocks), false;
    const size_t n = size_t(n_layers) * 16 * R.p.ctx * HD;
    __nv_bfloat16* kv;
    CK(cudaMalloc(&kv, n * 2));
    probe::fill_bf16<<<1024, 256>>>(kv, n, 99, 1.5f);
    R.p.kv = kv;
    CK(cudaMalloc(&R.p.part, sizeof(float) * 8 * R.p.splits * 4 * (2 + HD)));
  }
  std::printf("attention phase: %s\n", R.p.ctx > 0 ? "real (see ctx / splits below)" : "stand-in (a copy of q)");
  if (R.p.ctx > 0)
    std::printf("ctx %d keys, %d splits per kv head (%d keys a split)\n", R.p.ctx, R.p.splits, R.p.ctx / R.p.splits);
  R.x0.resize(H);
  for (int i = 0; i < H; ++i) R.x0[i] = std::sin(0.37f * i) + 0.25f * std::cos(1.3f * i);
  return true;
}

// kGroup's shape: a real attention of 16 splits a kv head, 128 blocks or more.
bool group_ok(const Runner& R) { return R.p.ctx > 0 && R.p.splits == 16 && R.blocks >= 128; }

bool check(const char* what, double err, bool ok) {
  std::printf("check: %s %.3g (%s)\n", what, err, ok ? "ok" : "FAIL");
  return ok;
}

// 2 layers against the CPU reference; then 16 layers of every form against the
// persistent kernel. False at the first failure.
bool run_checks(Runner& R, const Model& m, int pf) {
  Runner r2 = R;
  r2.p.n_layers = 2;
  r2.reset_x();
  r2.launch_persistent(kWork | kBarrier, 0);
  const double e2 = rel_l2(r2.read_x(), cpu_layers(m, 2, R.x0, R.p.kv, R.p.ctx));
  if (!check("2 layers, persistent vs the CPU reference, rel-L2 (bound 1e-4)", e2, e2 < 1e-4)) return false;
  auto run = [&](auto&& launch) {
    R.reset_x();
    launch();
    return R.read_x();
  };
  const auto a = run([&] { R.launch_persistent(kWork | kBarrier, 0); });
  const auto b = run([&] { CK(cudaGraphLaunch(R.chain_exec[0], R.st)); });
  const auto c = run([&] { R.launch_persistent(kWork | kBarrier, pf); });
  const auto dy = run([&] { R.launch_persistent(kWork | kBarrier | kDynamic, 0); });
  double diff = 0;
  for (int i = 0; i < H; ++i)
    diff = std::max(diff, double(std::fabs(a[i] - b[i])) + std::fabs(a[i] - c[i]) + std::fabs(a[i] - dy[i]));
  if (!check("16 layers, persistent vs chain, +pf and dynamic rows, max |diff| (bit-identical)", diff, diff == 0))
    return false;
  const auto sp = run([&] { R.launch_persistent(kWork | kBarrier | kSplit, pf); });
  const auto ca = run([&] { R.launch_persistent(kWork | kBarrier | kCarry, pf); });
  double dc = 0;
  for (int i = 0; i < H; ++i) dc = std::max(dc, double(std::fabs(a[i] - sp[i])) + std::fabs(a[i] - ca[i]));
  if (!check("16 layers, persistent with the split barrier (+pf) and the register carry, max |diff| (bit-identical)",
             dc, dc == 0))
    return false;
  if (group_ok(R)) {
    const auto gr = run([&] { R.launch_persistent(kWork | kBarrier | kGroup, 0); });
    double dg = 0;
    for (int i = 0; i < H; ++i) dg = std::max(dg, double(std::fabs(a[i] - gr[i])));
    if (!check("16 layers, persistent with the per-group attention dependency, max |diff| (bit-identical)", dg, dg == 0))
      return false;
  }
  const double eb = rel_l2(run([&] { R.launch_persistent(kWork | kBarrier | kBalanced, 0); }), a);
  if (!check("16 layers, persistent with balanced o/down units vs persistent rel-L2 (bound 1e-5: atomics add the "
             "k-quarters in any order)", eb, eb < 1e-5))
    return false;
  const double er = rel_l2(run([&] { R.launch_ring(kWork | kBarrier, kMaxStages); }), a);
  if (!check("16 layers, ring vs persistent rel-L2 (bound 1e-5: its norm sums over 512 consumer threads)", er,
             er < 1e-5))
    return false;
  if (R.p.ctx != 0) return true;
  R.launch_fused3(kWork | kBarrier);
  CK(cudaStreamSynchronize(R.st));
  std::vector<float> f(H);
  CK(cudaMemcpy(f.data(), (R.p.n_layers & 1) ? R.p.xb[1] : R.p.xb[0], H * 4, cudaMemcpyDeviceToHost));
  const double ef = rel_l2(f, a);
  return check("16 layers, fused3 vs persistent rel-L2 (bound 1e-4: split-k partials and atomics reorder down's sums)",
               ef, ef < 1e-4);
}

// Where a sync's time goes: one stamped launch (kStamp), per phase averaged over
// the middle layers, in µs -- the median block's work; the spread and the tail
// (last - median) of the blocks' finishing times; and the release, from the last
// block finishing the phase to the median block starting the next one.
void print_stamps(Runner& R, const char* label, const std::function<void()>& launch) {
  const int L = R.p.n_layers, G = R.blocks;
  const size_t n = size_t(L) * kPhases * G * 2;
  CK(cudaMemsetAsync(R.p.stamps, 0, n * 8, R.st));
  R.reset_x();
  launch();
  CK(cudaStreamSynchronize(R.st));
  std::vector<unsigned long long> t(n);
  CK(cudaMemcpy(t.data(), R.p.stamps, n * 8, cudaMemcpyDeviceToHost));
  auto at = [&](int l, int ph, int b, int w) { return double(t[((size_t(l) * kPhases + ph) * G + b) * 2 + w]); };
  static const char* names[kPhases] = {"qkv", "attention", "o_proj", "gate_up", "down"};
  std::printf("%s: where each phase's time goes (us, the mean over layers 1..%d)\n", label, L - 2);
  std::printf("  %-10s %8s %8s %8s %8s\n", "phase", "work", "spread", "tail", "release");
  for (int ph = 0; ph < kPhases; ++ph) {
    double work = 0, spread = 0, tail = 0, release = 0;
    for (int l = 1; l + 1 < L; ++l) {
      std::vector<double> end(G), dur(G), next(G);
      const int nl = ph + 1 < kPhases ? l : l + 1, np = (ph + 1) % kPhases;
      for (int b = 0; b < G; ++b) end[b] = at(l, ph, b, 1), dur[b] = end[b] - at(l, ph, b, 0), next[b] = at(nl, np, b, 0);
      const double last = *std::max_element(end.begin(), end.end());
      work += probe::quantile(dur, 0.5);
      spread += last - *std::min_element(end.begin(), end.end());
      tail += last - probe::quantile(end, 0.5);
      release += probe::quantile(next, 0.5) - last;
    }
    const double k = 1e-3 / (L - 2);
    std::printf("  %-10s %8.2f %8.2f %8.2f %8.2f\n", names[ph], work * k, spread * k, tail * k, release * k);
  }
}

void run_timings(Runner& R, const std::vector<int>& pfs) {
  const int n_layers = R.p.n_layers;
  const double bytes = double(n_layers) * 2.0 * (double(QKV) * H + double(H) * QD + 2.0 * I * H + double(H) * I) +
                       double(n_layers) * 16.0 * R.p.ctx * HD * 2.0;
  auto report = [&](const std::string& name, auto&& launch) {
    const double us = R.time_us(launch);
    std::printf("%-36s %8.1f us per %d layers  %6.2f us per layer  %6.2f TB/s\n", name.c_str(), us, n_layers,
                us / n_layers, bytes / us * 1e-6);
  };
  std::printf("weights (and K/V): %.1f MB per layer, %.2f GB in all\n", bytes / n_layers * 1e-6, bytes * 1e-9);
  report("stream (no barriers)", [&] { R.launch_persistent(kWork, 0); });
  report("barriers (no work)", [&] { R.launch_persistent(kBarrier, 0); });
  report("chain (PDL, graph)", [&] { CK(cudaGraphLaunch(R.chain_exec[0], R.st)); });
  report("chain+pf " + std::to_string(pfs[0]), [&] { CK(cudaGraphLaunch(R.chain_exec[1], R.st)); });
  report("persistent", [&] { R.launch_persistent(kWork | kBarrier, 0); });
  for (int pf : pfs) report("persistent+pf " + std::to_string(pf), [&] { R.launch_persistent(kWork | kBarrier, pf); });
  for (int pf : {0, pfs[0]}) {  // arrive, then the next phase's loads, then wait
    const std::string tag = pf ? " + pf " + std::to_string(pf) : "";
    report("persistent, split barrier" + tag, [&] { R.launch_persistent(kWork | kBarrier | kSplit, pf); });
    report("persistent, split + register carry" + tag, [&] { R.launch_persistent(kWork | kBarrier | kCarry, pf); });
  }
  report("stream, register carry (no barriers)", [&] { R.launch_persistent(kWork | kCarry, 0); });
  if (group_ok(R))
    report("persistent, per-group attention dependency", [&] { R.launch_persistent(kWork | kBarrier | kGroup, 0); });
  report("persistent, balanced o/down units", [&] { R.launch_persistent(kWork | kBarrier | kBalanced, 0); });
  report("chain, balanced o/down units", [&] { CK(cudaGraphLaunch(R.chain_exec[2], R.st)); });
  report("persistent, dynamic rows", [&] { R.launch_persistent(kWork | kBarrier | kDynamic, 0); });
  report("stream, dynamic rows", [&] { R.launch_persistent(kWork | kDynamic, 0); });
  if (R.p.ctx == 0) {
    report("fused3 stream (no barriers)", [&] { R.launch_fused3(kWork); });
    report("fused3 (3 syncs a layer)", [&] { R.launch_fused3(kWork | kBarrier); });
  }
  report("ring stream (no barriers)", [&] { R.launch_ring(kWork, kMaxStages); });
  report("ring, no dot products, no barriers", [&] { R.launch_ring(kWork | kNoMath, kMaxStages); });
  report("ring, no dot products, barriers", [&] { R.launch_ring(kWork | kNoMath | kBarrier, kMaxStages); });
  for (int stg = 2; stg <= kMaxStages; ++stg)
    report("ring " + std::to_string(stg) + " x 32 KB", [&] { R.launch_ring(kWork | kBarrier, stg); });
  std::printf("(times: median of 20 launches after 3 warm-ups, CUDA events; every launch reads all %d layers from HBM)\n",
              n_layers);
  print_stamps(R, "persistent", [&] { R.launch_persistent(kWork | kBarrier | kStamp, 0); });
  print_stamps(R, "persistent, split + register carry", [&] { R.launch_persistent(kWork | kBarrier | kCarry | kStamp, 0); });
  if (group_ok(R))
    print_stamps(R, "persistent, per-group attention dependency",
                 [&] { R.launch_persistent(kWork | kBarrier | kGroup | kStamp, 0); });
  const cudaGraphExec_t stamped = R.build_chain(0, kStamp);
  print_stamps(R, "chain (PDL, graph)", [&] { CK(cudaGraphLaunch(stamped, R.st)); });
}

}  // namespace

int main(int argc, char** argv) {
  CK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (!print_kernels(prop.multiProcessorCount, prop.name)) return 1;
  const int n_layers = 16;
  Model m = make_model(n_layers);
  Runner R;
  R.blocks = prop.multiProcessorCount;
  if (!setup(R, m, n_layers)) return 2;
  std::vector<int> pfs;
  for (int i = 1; i < argc; ++i) pfs.push_back(std::atoi(argv[i]));
  if (pfs.empty()) pfs = {2048, 4096};
  R.chain_exec[0] = R.build_chain(0);
  R.chain_exec[1] = R.build_chain(pfs[0]);
  R.chain_exec[2] = R.build_chain(0, kBalanced);
  if (!run_checks(R, m, pfs[0])) return 1;
  run_timings(R, pfs);
  return 0;
}
