#pragma once
// THE sampling algorithm, shared by the CPU reference (kernels/cpu/sample_cpu.cpp,
// argmax_cpu.cpp) and the CUDA variants. Both backends include this header so the
// pieces that decide WHICH token is drawn are literally the same code.
//
// For one row of logits l[0..V) with temperature T, top_k K, top_p P, seed, step:
//
//  1. Greedy. If !(T > 0) (T <= 0 or NaN) the result is argmax(l) (step 5 below).
//  2. Random number. u = uniform01(seed, step): Philox4x32-10 with
//       key     = {uint32(seed), uint32(seed >> 32)}
//       counter = {uint32(step), 0, 0, 0}
//     and u = (out[0] >> 8) * 2^-24, a float in [0, 1) (exact: 24 bits).
//     The draw depends on (seed, step) only -- not on the row or the batch.
//  3. Rank order. Tokens are ranked by logit, highest first, ties by lower index;
//     NaN ranks below every number (ranks_before() below). The ranking uses the
//     logits themselves, so it is exact and identical on every backend.
//     m = the largest non-NaN logit. If m is not finite (all NaN / -inf, or a +inf
//     logit), the row is sampled greedily (argmax).
//  4. Weights. w_i = expf((l_i - m) / T) in float (weight() below); NaN and -inf
//     logits weigh 0. The top-ranked token has w = 1. This is softmax(l / T) with
//     max subtraction, left unnormalised (normalising cancels in every step below).
//     Candidates: the first k tokens in rank order, k = min(K, V) when K > 0, else V.
//     Top-p (active when P < 1; a NaN P is inactive): C_j = w_(0) + ... + w_(j-1),
//     summed in float in rank order; S = C_k. Keep the smallest prefix n >= 1 with
//     C_n >= P * S (so P <= 0 keeps only the top token). Inactive: n = k.
//     Draw: target = u * C_n (float); the result is the token of the smallest rank r < n
//     with C_(r+1) > target. A zero-weight token is never drawn: if float rounding
//     leaves no such r, the result is the last rank r < n with w_(r) > 0
//     (pick_rank() below). So tokens of weight 0 may be dropped before ranking.
//  5. Argmax. The index of the largest logit, lowest index on ties; NaN is smaller
//     than every number, so a row that is all NaN returns 0 (argmax_better() below).
//
// Backends that sum in a different order (parallel reductions), or whose expf differs
// in the last ulp (host libm vs device), can differ from the reference only when
// `target` falls within float rounding of a boundary C_j or when C_n ~ P * S; tests
// comparing backends must allow for that (rare) case. Logits that themselves
// differ in the last bits (another summation order upstream: tensor parallelism,
// another GEMM) can also swap the rank of two near-equal logits, and then the
// token at the drawn rank differs; deep in the tail of a flat distribution
// (a draw at rank ~1700 of 128 k) that is not rare, so such tests draw from a
// top-k set of well-separated logits.
#include <cmath>
#include <cstdint>

#include "kernels/base/host_device.h"

namespace lantern::kernels::sampling {

struct Philox4 {
  uint32_t v[4];
};

// Philox4x32-10 (Salmon et al., SC'11): 10 rounds, key bumped between rounds.
LANTERN_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// Step 2: the row's uniform draw in [0, 1).
LANTERN_HD float uniform01(uint64_t seed, int32_t step) {
  const Philox4 out = philox4x32_10(Philox4{{static_cast<uint32_t>(step), 0u, 0u, 0u}},
                                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(out.v[0] >> 8) * (1.0f / 16777216.0f);
}

// Steps 3 and 5: true when token (la, ia) ranks strictly before (lb, ib).
// A total order: higher logit first, NaN last, lower index first among equals.
LANTERN_HD bool ranks_before(float la, int32_t ia, float lb, int32_t ib) {
  const bool a_nan = !(la == la), b_nan = !(lb == lb);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && la != lb) return la > lb;
  return ia < ib;
}
// Argmax reduction step: the better of two (value, index) candidates.
LANTERN_HD bool argmax_better(float la, int32_t ia, float lb, int32_t ib) {
  return ranks_before(la, ia, lb, ib);
}

LANTERN_HD bool is_greedy(float temperature) {
  return !(temperature > 0.0f);
}
// Step 3: m must be finite for the weights to be meaningful.
LANTERN_HD bool max_is_usable(float max_logit) {
  return max_logit > -INFINITY && max_logit < INFINITY;
}

// Step 4: unnormalised softmax(l / T) weight. NaN and -inf weigh exactly 0.
LANTERN_HD float weight(float logit, float max_logit, float temperature) {
  if (!(logit > -INFINITY)) return 0.0f;
  return expf((logit - max_logit) / temperature);
}

// Step 4: number of top-k candidates.
LANTERN_HD int32_t candidate_count(int32_t top_k, int32_t vocab) {
  return top_k > 0 && top_k < vocab ? top_k : vocab;
}
LANTERN_HD bool top_p_active(float top_p) {
  return top_p < 1.0f;
}

// Step 4 on candidates already in rank order: w_ranked[0..k) are their weights.
// Returns the chosen rank (index into w_ranked). Sequential and in float, so a
// device variant that has sorted its candidates can call it from one thread.
LANTERN_HD int32_t pick_rank(const float* w_ranked, int32_t k, float top_p, float u) {
  int32_t n = k;
  if (top_p_active(top_p)) {
    float total = 0.0f;
    for (int32_t j = 0; j < k; ++j) total += w_ranked[j];
    const float threshold = top_p * total;
    float cum = 0.0f;
    n = 0;
    while (n < k) {
      cum += w_ranked[n++];
      if (cum >= threshold) break;
    }
    if (n < 1) n = 1;
  }
  float mass = 0.0f;
  for (int32_t j = 0; j < n; ++j) mass += w_ranked[j];
  const float target = u * mass;
  float cum = 0.0f;
  int32_t last_positive = 0;
  for (int32_t r = 0; r < n; ++r) {
    cum += w_ranked[r];
    if (w_ranked[r] > 0.0f) last_positive = r;
    if (cum > target) return r;
  }
  return last_positive;
}

// ---------------------------------------------------------------------------
// The race: a second algorithm over the same candidates (sample.7 grid_race on
// the GPU, sample.8 cpu_race on the CPU, which are its reference). It draws
// from the same restricted softmax as the inverse CDF above, but WHICH token a
// (seed, step) draws differs, so its tokens are compared with cpu_race's, not
// cpu_ref's. It needs no rank order, only counts and masses of the tokens
// ranked before a given one, so a GPU finds the token with a few grid-wide
// reductions instead of a sort or a histogram search (the sort-free rejection
// idea of FlashInfer's samplers, made exact and deterministic here).
//
// For one row, with T, K, P, seed, step as above:
//  R1. Greedy as step 1 (and step 3's unusable max): argmax.
//  R2. Fixed-point weights: z_i = (m - l_i) * (1/T) (0 when l_i >= m), the
//      multiplier 1/T rounded to float; f_i = round(exp2(-z_i * log2 e) * 2^40)
//      as an unsigned 64-bit integer (race_fixed_weight); NaN and -inf weigh 0,
//      the top-ranked token 2^40. Tokens more than ~28.4 nats below the max
//      (relative weight < 2^-41) weigh 0 and are never drawn.
//  R3. Candidates: token t of rank r (step 3's order) with c_t = r tokens and
//      M_t = the sum of their f ranked before it is in the set N when f_t > 0,
//      r < k (k as step 4), and r == 0 or (top-p inactive) or
//      double(M_t) < double(P) * double(S), where S is the sum of f over the
//      first k ranks (race_in_set). N is a prefix of the rank order; the sums are
//      exact integers, so every summation order decides alike.
//  R4. Draw: the token of N with the largest key g_t = l_t * (1/T) + G_t, ties
//      to the lower index (race_key), where G_t = -log(-log(u_t)) is the token's
//      Gumbel noise from Philox4x32-10 with the row's key (step 2), counter
//      {step, t / 4, kRaceTag, 0} and word t % 4: u_t = ((w >> 9) + 0.5) * 2^-23,
//      in (0, 1) (race_noise). argmax(l/T + Gumbel) is a draw from softmax(l/T);
//      restricted to N it is a draw from N's renormalised weights.
// A backend may find the maximum of R4 by rejection: take the key's maximum s
// over all tokens; while s is not in N, take the maximum over the tokens ranked
// before s. N is a prefix, so every rejected s ranks after all of N and the
// tokens before it include all of N: the result is exactly R4's, and the loop
// ends (the rank-0 token is always in N). Host and device logf / exp2f can
// differ in the last ulp: the backends then differ only when two keys are
// within ~1e-6 of each other or M_t is within ~1e-6 of P * S.
constexpr uint32_t kRaceTag = 0x52414345u;  // "RACE": a counter word the inverse CDF never uses

// R4: the Philox words of the group of 4 tokens holding `token` (word t % 4 is t's).
LANTERN_HD Philox4 race_words(uint64_t seed, int32_t step, int32_t token) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(step), static_cast<uint32_t>(token) >> 2, kRaceTag, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}
// R4: the Gumbel noise of one word, finite: u in [2^-24, 1 - 2^-24].
LANTERN_HD float race_gumbel(uint32_t word) {
  const float u = (static_cast<float>(word >> 9) + 0.5f) * (1.0f / 8388608.0f);
  return -logf(-logf(u));
}
LANTERN_HD float race_noise(uint64_t seed, int32_t step, int32_t token) {
  return race_gumbel(race_words(seed, step, token).v[token & 3]);
}
LANTERN_HD float race_key(float logit, float inv_temp, float noise) {
  return logit * inv_temp + noise;
}
// R2 (host form; the device computes the same with exp2f in ZBins::fixed_weight).
inline uint64_t race_fixed_weight(float logit, float max_logit, float inv_temp) {
  if (!(logit > -INFINITY)) return 0;
  const float d = max_logit - logit;
  const float z = d > 0.0f ? d * inv_temp : 0.0f;
  return static_cast<uint64_t>(std::nearbyint(exp2f(z * -1.4426950408889634f) * 1099511627776.0f));
}
// R3: is the token (count_before tokens of total weight mass_before ranked
// before it, weight own) in the set? top_k_mass: S.
LANTERN_HD bool race_in_set(uint64_t count_before, uint64_t mass_before, uint64_t own, int32_t k,
                            uint64_t top_k_mass, float top_p) {
  if (own == 0 || count_before >= static_cast<uint64_t>(k)) return false;
  if (count_before == 0 || !top_p_active(top_p)) return true;
  return static_cast<double>(mass_before) < static_cast<double>(top_p) * static_cast<double>(top_k_mass);
}

}  // namespace lantern::kernels::sampling
