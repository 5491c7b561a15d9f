// sample variant 7 (grid_race): the race of kernels/sampling.h (R1-R4) -- the
// largest Gumbel key over the top-k / top-p set, found by rejection -- on
// G blocks per row, with a few grid-wide reductions instead of a sort or a
// histogram search. Its reference is sample.8 cpu_race (not cpu_ref: the race
// draws from the same restricted softmax, but other tokens for a (seed, step)).
//
// Why: sample.6 (grid_gather) spends its 22 us at b = 1 in chains of block
// barriers over a 1024-bin histogram, the list of gathered tokens and the
// crossing search (docs/performance.md, session 23). The race needs none of
// that for top-p: only counts and masses of the tokens ranked before ONE token.
// Rounds, each one reduction over the row's G blocks of 256 threads (1024 for
// slices re-read from the logits; per-field
// global atomics into the round's accumulators, a row barrier, every block
// reading the result):
//   R0  every block loads its slice (kept in shared memory), makes its tokens'
//       Gumbel keys, and adds its argmax key and its best race key; with top-k,
//       also a 256-bin histogram of the logits' top byte (the first of four
//       radix digits of the k-th logit).
//   R1-3 (top-k only) the next three digits: then theta, the k-th largest logit
//       (as an orderable 32-bit value), and how many tokens lie above it.
//   M   (the membership round, repeated only on a rejection) for the candidate
//       s: the count and fixed-point mass of the tokens ranked before s, the best
//       race key among them (the next candidate if s is rejected), and, in the
//       first M only, S (the whole row's mass; with top-k, the mass above theta).
//       Every block then decides sampling::race_in_set(s) from the same integer
//       sums: the same decision everywhere, deterministic.
// Top-p alone: R0 and one M (a second M with probability about 1 - P).
// Rows with G = 1 block (more rows than fit the GPU as grids) run the same
// rounds with __syncthreads only; slices too large for shared memory re-read
// the logits (L2) and remake the keys in every pass.
//
// Measured (H200, docs/performance.md session 26), b = 1, T 0.8: top_p 0.95
// 11.4 us per call (bench_kernels, L2 flushed; sample.6 21.9) and 8.6 us in the
// engine (CUPTI; sample.6 19.2); top_k 50 + top_p 0.9 22.4-25.5 us (sample.6
// 22.5: the four digit rounds); b = 8 29.0 us (sample.6 28.5); from 64 rows on,
// slower than sample.6 (the keys are remade from the logits in every pass).
// Hence tested only. The phases
// (LANTERN_SAMPLE_RACE_PROBE=1): the barrier ~1.3 us per round, the first
// pass ~2.2 us (cold logits), a membership pass ~0.8 us. Re-read slices (from
// 17 rows) run 1024-thread blocks: b = 64 163 us, b = 256 483 (sample.6: 115,
// 427).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_race.cuh"
#include "kernels/cuda/stream_slot.h"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace sample_bins;
using namespace race_detail;

// Zero at module load; every launch leaves bar, done, acc and hist zero (the
// row's last block resets them). 4 x 1.6 MB of static device memory.
__device__ RaceSlot g_race[kStreamSlots];

// R0: every block loads and keys its slice; the row's argmax key and best race
// key (with top-k, also the top digit's histogram). Every block gets the same.
template <bool kSmem, int kThreads>
__device__ Rec race_r0(const Slice<kSmem, kThreads>& sl, Row& rw, Shared& s, bool with_k,
                       const wide_probe::Stamp& stamp) {
  if (threadIdx.x < kDigitBins) s.hist[threadIdx.x] = 0;
  __syncthreads();
  Rec mine{};
  sl.first([&](float l, float key, int32_t id) {
    const uint64_t am = (uint64_t(orderable(l)) << 32) | uint32_t(~uint32_t(id));
    mine.amax = am > mine.amax ? am : mine.amax;
    const uint64_t rk = race_pack(l, key, id);
    if (rk > mine.key) mine.key = rk, mine.key_logit = orderable(l);
    if (with_k) atomicAdd(&s.hist[orderable(l) >> 24], 1u);
  });
  stamp(1);
  const Rec mine_all = block_reduce<kKey | kAmax, kThreads>(mine, s, rw.parity);
  stamp(12);
  if (with_k) publish_hist(s, rw, 0);
  rw.stamp_slot = 13;
  const Rec r0 = rw.exchange<kKey | kAmax>(mine_all, s);
  rw.stamp_slot = 0;
  stamp(2);
  return r0;
}

// R1-R3 (top-k, after R0's top digit): theta, the k-th largest logit's orderable
// value, and how many tokens lie strictly above it.
template <bool kSmem, int kThreads>
__device__ void find_theta(const Slice<kSmem, kThreads>& sl, Row& rw, Shared& s, int k, uint32_t* theta,
                           uint32_t* above_theta) {
  unsigned int need = unsigned(k);
  *theta = *above_theta = 0;
  for (int level = 0;; ++level) {
    const int shift = 24 - 8 * level;
    read_hist(s, rw, level);
    pick_digit<kThreads>(s, need);
    *theta |= uint32_t(s.digit) << shift;
    *above_theta += s.above;
    need -= s.above;
    if (shift == 0) return;
    __syncthreads();  // s.digit and s.hist read by all before they change
    if (threadIdx.x < kDigitBins) s.hist[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t hi_mask = ~0u << shift, prefix = *theta;  // the digits fixed so far
    const int next = shift - 8;
    sl.again([](float, int32_t) { return false; }, [&](float l, float, int32_t) {
      const uint32_t o = orderable(l);
      if ((o & hi_mask) == prefix) atomicAdd(&s.hist[(o >> next) & 0xffu], 1u);
    });
    publish_hist(s, rw, level + 1);
    rw.exchange<0>(Rec{}, s);
  }
}

// The row's sampling parameters as the membership rounds use them.
struct RaceRow {
  ZBins bins;  // the row max and 1/T: the fixed-point weights
  int k;       // top-k candidates (vocab: off)
  float p;     // top-p
  bool with_k;
  uint32_t theta, above_theta;  // with_k: find_theta's
};

// M rounds (sampling.h R3-R4 by rejection): from R0's best key, the token of the
// set with the largest key. Each round, for the candidate s: the count and mass
// ranked before s and the best key among them (the next candidate); in the
// first, S (the row's mass, or with top-k the mass above theta).
template <bool kSmem, int kThreads>
__device__ int32_t race_membership(const Slice<kSmem, kThreads>& sl, Row& rw, Shared& s, const Rec& r0,
                                   const RaceRow& q, const wide_probe::Stamp& stamp) {
  uint64_t s_key = r0.key;
  float s_logit = logit_of_orderable(r0.key_logit);
  int rounds = 0;
  uint64_t set_mass = 0;  // S
  int32_t token = int32_t(~uint32_t(r0.amax));  // the rank-0 token: always in the set (a guard only)
  while (s_key != 0) {
    const int32_t s_id = int32_t(~uint32_t(s_key));
    const uint64_t s_sort = sort_key(s_logit, s_id);
    const bool first_m = rounds == 0;
    Rec m{};
    sl.again(
        [&](float l, int32_t id) { return sort_key(l, id) < s_sort && (!q.with_k || orderable(l) >= q.theta); },
        [&](float l, float key, int32_t id) {
          const uint32_t o = orderable(l);
          const uint64_t w = q.bins.fixed_weight(l);
          if (first_m) m.extra += q.with_k ? (o > q.theta ? w : 0) : w;
          if (sort_key(l, id) < s_sort) {
            m.cnt += 1;
            m.mass += w;
            if (!q.with_k || o >= q.theta) {
              const uint64_t rk = race_pack(l, key, id);
              if (rk > m.key) m.key = rk, m.key_logit = o;
            }
          }
        });
    if (first_m) stamp(9);
    const Rec m_all = block_reduce<kSums | kKey, kThreads>(m, s, rw.parity);
    if (first_m) stamp(10), rw.stamp_slot = 11;
    const Rec all = rw.exchange<kSums | kKey>(m_all, s);
    rw.stamp_slot = 0;
    stamp(4 + min(rounds++, 4));
    if (first_m)
      set_mass = q.with_k ? all.extra + uint64_t(q.k - int(q.above_theta)) *
                                            q.bins.fixed_weight(logit_of_orderable(q.theta))
                          : all.extra;
    if (sampling::race_in_set(all.cnt, all.mass, q.bins.fixed_weight(s_logit), q.k, set_mass, q.p)) {
      token = s_id;
      break;
    }
    s_key = all.key;
    s_logit = logit_of_orderable(all.key_logit);
  }
  stamp.set(14, uint64_t(rounds));
  return token;
}

// The row's last block to finish resets its barrier, accumulators and (top-k)
// histograms for the next launch.
__device__ void reset_row(Row& rw, bool with_k, int threads) {
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    __threadfence();
    is_last = atomicAdd(&rw.sync->done, 1u) == unsigned(rw.G - 1);
  }
  __syncthreads();
  if (!is_last) return;
  if (with_k)
    for (int i = threadIdx.x; i < kDigits * kDigitBins; i += threads) (&rw.sync->hist[0][0])[i] = 0;
  if (threadIdx.x < 3 * kAccFields) rw.sync->acc[threadIdx.x / kAccFields][threadIdx.x % kAccFields].v = 0;
  if (threadIdx.x == 0) rw.sync->bar = 0, rw.sync->done = 0;
}

// kEarly (sample.9, kSmem only): launched with programmatic dependent launch,
// the blocks make their slice's Gumbel noise before griddepcontrol.wait --
// while the LM head still runs -- and the first pass after it only adds
// l / T: the same keys, so the same tokens as sample.7.
template <bool kSmem, int kThreads, bool kEarly>
__global__ void __launch_bounds__(kThreads)
    sample_race_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                       const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                       const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                       int32_t* __restrict__ out, int vocab, int slice_len, RaceSlot* __restrict__ slot,
                       uint64_t* probe) {
  extern __shared__ __align__(16) unsigned char smem[];
  const wide_probe::Stamp stamp{probe};
  stamp(0);
  Shared& s = *reinterpret_cast<Shared*>(smem);
  const int row = blockIdx.y, rank = blockIdx.x, G = gridDim.x;
  const float* x = logits + size_t(row) * vocab;
  Row rw{G, rank, G > 1 ? slot->rows + row : nullptr, x, 0u, &stamp, 0, 0};
  const float temp = temperature[row];
  const int k = sampling::candidate_count(top_k[row], vocab);
  const bool greedy_t = sampling::is_greedy(temp);
  const bool with_k = k < vocab && !greedy_t;
  const float inv_t = greedy_t ? 0.0f : 1.0f / temp;
  const Slice<kSmem, kThreads> sl{x,
                                  reinterpret_cast<float*>(smem + ((sizeof(Shared) + 15) & ~size_t(15))),
                                  rank * slice_len,
                                  max(0, min(vocab - rank * slice_len, slice_len)),
                                  slice_len,
                                  seeds[row],
                                  steps[row],
                                  inv_t,
                                  !greedy_t,
                                  kEarly && kSmem && !greedy_t};
  if constexpr (kEarly) {
    if (sl.early) sl.make_noise();
    grid_dependency_wait();  // the logits are the LM head's
    trigger_dependents();
  }
  const Rec r0 = race_r0(sl, rw, s, with_k, stamp);
  const float max_logit = logit_of_orderable(uint32_t(r0.amax >> 32));
  int32_t token = int32_t(~uint32_t(r0.amax));  // greedy: the argmax
  if (!greedy_t && sampling::max_is_usable(max_logit)) {
    RaceRow q{ZBins{max_logit, inv_t}, k, top_p[row], with_k, 0u, 0u};
    if (with_k) find_theta(sl, rw, s, k, &q.theta, &q.above_theta);
    stamp(3);
    token = race_membership(sl, rw, s, r0, q, stamp);
  }
  if (rank == 0 && threadIdx.x == 0) out[row] = token;
  stamp(15);
  if (G > 1) reset_row(rw, with_k, kThreads);
}

// Blocks per row at b rows: the SMs shared out, at most kDefaultG (LANTERN_SAMPLE_RACE_BLOCKS=N
// forces N; capped so the grid fits one block per SM); one when the rows
// outnumber the row slots.
constexpr int kDefaultG = 128;
int race_blocks(int rows) {
  static const int forced = env_int("LANTERN_SAMPLE_RACE_BLOCKS");
  if (rows > kSlotRows) return 1;
  const int fit = std::min(kMaxG, sm_count() / std::max(rows, 1));
  return std::max(1, std::min(forced > 0 ? forced : kDefaultG, fit));
}

// LANTERN_SAMPLE_RACE_PROBE=1 (an experiment knob for bench_kernels; never
// where launches are captured): %globaltimer stamps of every block of row 0,
// printed per launch to stderr as the median block's us after the first
// block's start: loaded (first pass), r0 (after R0's exchange), radix (after
// the digits), m1.. (after each membership round), end; and the rounds taken.
void print_race_probe(const wide_probe::Probe& p, int G, int rows, cudaStream_t stream) {
  const wide_probe::ProbeRead r = wide_probe::read_probe(p, G, rows, stream);
  const int rounds = int(r.block(0)[14]);
  std::fprintf(stderr,
               "[sample.7 probe] %d blocks/row: loaded %.2f reduced %.2f barrier %.2f r0 %.2f radix %.2f | m1: pass "
               "%.2f reduced %.2f barrier %.2f |",
               G, r.median_us(1), r.median_us(12), r.median_us(13), r.median_us(2), r.median_us(3), r.median_us(9),
               r.median_us(10), r.median_us(11));
  for (int i = 0; i < std::min(rounds, 5); ++i) std::fprintf(stderr, " m%d %.2f", i + 1, r.median_us(4 + i));
  std::fprintf(stderr, " end %.2f (%d rounds)\n", r.median_us(15), rounds);
}

template <bool kSmem, int kThreads, bool kEarly>
cudaError_t launch_race(const SampleArgs& a, int G, int slice_len, cudaStream_t stream) {
  RaceSlot* slot = stream_slot<kStreamSlots, 1>(stream, g_race);
  static size_t smem_allowed = 0;  // per instantiation
  const size_t smem = ((sizeof(Shared) + 15) & ~size_t(15)) + (kSmem ? size_t(2) * slice_len * sizeof(float) : 0);
  allow_smem(sample_race_kernel<kSmem, kThreads, kEarly>, smem, &smem_allowed);
  // G > 1: a cooperative launch (row barriers); refused, the caller runs one block per row.
  // kEarly: also programmatic dependent launch (cuda_common.cuh's pdl_allowed()).
  const sample_grid::GridLaunch l(G, a.b, kThreads, smem, stream, G > 1, kEarly && pdl_allowed());
  static wide_probe::ProbeSwitch probe_switch("LANTERN_SAMPLE_RACE_PROBE");
  const wide_probe::Probe& probe = probe_switch.buffer(size_t(G) * a.b * wide_probe::kProbeSlots);
  const cudaError_t err = cudaLaunchKernelEx(&l.cfg, sample_race_kernel<kSmem, kThreads, kEarly>, a.logits, a.temperature,
                                             a.top_k, a.top_p, a.seeds, a.steps, a.out, a.vocab, slice_len, slot,
                                             probe.dev);
  if (err == cudaSuccess && probe.dev) print_race_probe(probe, G, a.b, stream);
  return err;
}

// kEarly: sample.9's early noise where the slice is in shared memory (re-read slices: sample.7's kernel).
template <bool kEarly>
cudaError_t launch_race_g(const SampleArgs& a, int G, cudaStream_t stream) {
  const int slice_len = ((a.vocab + G - 1) / G + 3) / 4 * 4;  // groups of 4 tokens never straddle blocks
  return slice_len <= kSmemSlice ? launch_race<true, kSmallThreads, kEarly>(a, G, slice_len, stream)
                                 : launch_race<false, kWideThreads, false>(a, G, slice_len, stream);
}

template <bool kEarly>
void race_launch(const SampleArgs& a, const LaunchCtx& ctx, const char* who) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "%s: bad shape b=%d vocab=%d", who, a.b, a.vocab);
  if (a.b == 0) return;
  const int G = race_blocks(a.b);
  cudaError_t err = launch_race_g<kEarly>(a, G, ctx.stream);
  if (G > 1 && err == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();  // refused: one block per row instead
    err = launch_race_g<kEarly>(a, 1, ctx.stream);
  }
  if (err != cudaSuccess) ::lantern::throw_cuda_error(err, who, __FILE__, __LINE__);
  CUDA_CHECK(cudaGetLastError());
}

void sample_grid_race(const SampleArgs& a, const LaunchCtx& ctx) { race_launch<false>(a, ctx, "sample.grid_race"); }
void sample_grid_race_early(const SampleArgs& a, const LaunchCtx& ctx) {
  race_launch<true>(a, ctx, "sample.grid_race_early");
}

}  // namespace

void register_sample_race_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_grid_race, sample_cost<2>>(
      7, "grid_race", Backend::cuda,
      "the race (kernels/sampling.h R1-R4; reference cpu_race): the largest Gumbel key over the "
      "top-k / top-p set by rejection, on up to 128 blocks of 256 threads per row: one grid-wide "
      "reduction for the argmax and the best key, one for the count and mass ranked before it "
      "(top-k: three more for the k-th logit's radix digits); no sort, no histogram search",
      kTestedOnly));
  r.add(make_entry<SampleArgs, sample_grid_race_early, sample_cost<2>>(
      9, "grid_race_early", Backend::cuda,
      "sample.7 launched with programmatic dependent launch: each block makes its slice's Gumbel "
      "noise before the dependency wait (under the LM head), the first pass adds l / T -- the same "
      "keys and tokens as sample.7 (reference cpu_race)",
      kTestedOnly));
}

}  // namespace lantern::kernels
