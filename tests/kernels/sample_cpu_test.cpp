// CPU reference: sampling (kernels/sampling.h) -- the Philox generator, greedy and
// top-k = 1 cases, reproducibility, and that sampled frequencies follow
// softmax(logits / T) restricted to top-k / top-p; each for both algorithms
// (sample.0 cpu_ref, the inverse CDF; sample.8 cpu_race, the race), plus the
// race's Gumbel noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/registry.h"
#include "kernels/sampling.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int32_t step = 0;
};

// Samples each row of `logits` [rows.size(), vocab] with its own parameters.
std::vector<int32_t> run_sample(const std::vector<float>& logits, int vocab,
                                const std::vector<RowParams>& rows, const char* variant = "cpu_ref") {
  const int b = int(rows.size());
  std::vector<float> temperature(b), top_p(b);
  std::vector<int32_t> top_k(b), steps(b), out(b, -7);
  std::vector<uint64_t> seeds(b);
  for (int i = 0; i < b; ++i) {
    temperature[i] = rows[i].temperature;
    top_k[i] = rows[i].top_k;
    top_p[i] = rows[i].top_p;
    seeds[i] = rows[i].seed;
    steps[i] = rows[i].step;
  }
  launch(Registry::global().find(Family::sample, variant),
         SampleArgs{logits.data(), temperature.data(), top_k.data(), top_p.data(), seeds.data(),
                    steps.data(), out.data(), b, vocab},
         LaunchCtx{});
  return out;
}

std::vector<float> repeat_row(const std::vector<float>& row, int times) {
  std::vector<float> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), row.begin(), row.end());
  return out;
}

int32_t first_argmax(const std::vector<float>& row, size_t offset, int vocab) {
  return int32_t(std::max_element(row.begin() + offset, row.begin() + offset + vocab) -
                 row.begin() - offset);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  using sampling::Philox4;
  auto same = [](Philox4 a, Philox4 b) { return std::equal(a.v, a.v + 4, b.v); };
  EXPECT_TRUE(same(sampling::philox4x32_10({{0, 0, 0, 0}}, 0, 0),
                   {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}));
  EXPECT_TRUE(same(sampling::philox4x32_10({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u),
                   {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}));
  EXPECT_TRUE(same(sampling::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                           0xa4093822u, 0x299f31d0u),
                   {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}));
}

TEST(Philox, UniformDrawsAreUniformInUnitInterval) {
  const uint64_t seed = test::rng()();
  const int draws = 1 << 20, bins = 64;
  std::vector<double> counts(bins, 0);
  double sum = 0;
  for (int step = 0; step < draws; ++step) {
    const float u = sampling::uniform01(seed, step);
    ASSERT_TRUE(u >= 0.0f && u < 1.0f) << u;
    sum += u;
    counts[int(u * bins)] += 1;
  }
  // Mean of U(0,1): sd sqrt(1/12/N); 6 sd.
  EXPECT_NEAR(sum / draws, 0.5, 6 * std::sqrt(1.0 / 12 / draws));
  double chi2 = 0;
  for (double c : counts)
    chi2 += (c - double(draws) / bins) * (c - double(draws) / bins) / (double(draws) / bins);
  EXPECT_LT(chi2, 130.0) << "63 dof: mean 63, sd 11; 130 is p < 1e-6";
  // Both halves of the 64-bit seed matter.
  EXPECT_NE(sampling::uniform01(1, 0), sampling::uniform01(1ull | (1ull << 32), 0));
}

TEST(PickRank, FollowsTheSpecifiedInverseCdf) {
  const std::vector<float> w = {1.0f, 0.5f, 0.25f, 0.25f};  // mass 2
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 1.0f, 0.0f), 0);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 1.0f, 0.49f), 0);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 1.0f, 0.5f), 1);  // target 1.0: C_1 = 1 is not > 1
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 1.0f, 0.8f), 2);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 1.0f, 0.99f), 3);
  // top_p 0.7: C_1 = 1 < 1.4, C_2 = 1.5 >= 1.4 -> keep ranks 0, 1 (mass 1.5).
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 0.7f, 0.66f), 0);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 0.7f, 0.67f), 1);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 0.7f, 0.99f), 1);
  EXPECT_EQ(sampling::pick_rank(w.data(), 4, 0.0f, 0.99f), 0);  // top_p <= 0: top token only
  EXPECT_EQ(sampling::pick_rank(w.data(), 2, 1.0f, 0.99f), 1);  // k = 2
  const std::vector<float> zeros = {1.0f, 0.5f, 0.0f, 0.0f};
  EXPECT_EQ(sampling::pick_rank(zeros.data(), 4, 1.0f, 0.99999994f),
            1);  // zero weights never drawn
}

// Each algorithm's CPU variant (the parameter: its registry name).
class SampleCpu : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<int32_t> run_sample(const std::vector<float>& logits, int vocab,
                                  const std::vector<RowParams>& rows) const {
    return kernels::run_sample(logits, vocab, rows, GetParam());
  }
};
INSTANTIATE_TEST_SUITE_P(Algorithms, SampleCpu, ::testing::Values("cpu_ref", "cpu_race"));

TEST_P(SampleCpu, NonPositiveTemperatureIsArgmax) {
  const int vocab = 1000;
  const std::vector<float> logits = test::random_floats(size_t(3) * vocab, -5.f, 5.f);
  for (float t : {0.0f, -1.0f, NAN}) {
    const std::vector<int32_t> out =
        run_sample(logits, vocab, {{t, 0, 1.0f, 1, 0}, {t, 5, 0.5f, 2, 3}, {t, 0, 1.0f, 3, 9}});
    for (int r = 0; r < 3; ++r)
      EXPECT_EQ(out[r], first_argmax(logits, size_t(r) * vocab, vocab)) << t;
  }
}

TEST_P(SampleCpu, TopKOneAndTopPZeroAreArgmax) {
  const int vocab = 500, b = 64;
  const std::vector<float> logits = test::random_floats(size_t(b) * vocab, -3.f, 3.f);
  std::vector<RowParams> k1(b), p0(b);
  for (int i = 0; i < b; ++i) {
    k1[i] = {1.0f, 1, 1.0f, 42, i};
    p0[i] = {1.0f, 0, 0.0f, 42, i};
  }
  const std::vector<int32_t> out_k = run_sample(logits, vocab, k1),
                             out_p = run_sample(logits, vocab, p0);
  for (int r = 0; r < b; ++r) {
    EXPECT_EQ(out_k[r], first_argmax(logits, size_t(r) * vocab, vocab)) << r;
    EXPECT_EQ(out_p[r], first_argmax(logits, size_t(r) * vocab, vocab)) << r;
  }
}

TEST_P(SampleCpu, ReproducibleForTheSameSeedAndStepOnly) {
  const int vocab = 1000, b = 60;
  const std::vector<float> row(vocab, 0.0f);  // uniform: every draw is informative
  const std::vector<float> logits = repeat_row(row, b);
  const uint64_t seed = test::rng()();
  std::vector<RowParams> params(b);
  for (int i = 0; i < b; ++i) params[i] = {1.0f, 0, 1.0f, seed, i / 2};  // pairs share a step
  const std::vector<int32_t> first = run_sample(logits, vocab, params);
  EXPECT_EQ(run_sample(logits, vocab, params), first);
  std::set<int32_t> distinct;
  for (int i = 0; i < b; i += 2) {
    EXPECT_EQ(first[i], first[i + 1]) << "same (seed, step) in two rows";
    distinct.insert(first[i]);
  }
  // 30 steps over 1000 equally likely tokens: ~29.6 distinct expected.
  EXPECT_GE(distinct.size(), 20u);
  // Another seed, same steps: a different sequence.
  for (auto& p : params) p.seed = seed + 1;
  EXPECT_NE(run_sample(logits, vocab, params), first);
}

TEST_P(SampleCpu, TiesRankByLowerIndexAndBadLogitsAreNeverDrawn) {
  const int vocab = 50, b = 400;
  // All tied: top_k 3 keeps tokens 0, 1, 2.
  std::vector<RowParams> params(b);
  for (int i = 0; i < b; ++i) params[i] = {1.0f, 3, 1.0f, 7, i};
  std::set<int32_t> seen;
  for (int32_t t : run_sample(std::vector<float>(size_t(b) * vocab, 1.5f), vocab, params))
    seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));

  // NaN and -inf tokens are never drawn; an all-NaN row is token 0; +inf wins.
  std::vector<float> row = test::random_floats(vocab, -1.f, 1.f);
  for (int i = 0; i < vocab; i += 2) row[i] = i % 4 ? NAN : -INFINITY;
  for (int i = 0; i < b; ++i) params[i] = {2.0f, 0, 1.0f, 9, i};
  seen.clear();
  for (int32_t t : run_sample(repeat_row(row, b), vocab, params)) seen.insert(t);
  for (int32_t t : seen) EXPECT_EQ(t % 2, 1) << t;
  EXPECT_GT(seen.size(), 10u);
  EXPECT_EQ(run_sample(std::vector<float>(vocab, NAN), vocab, {{1.0f, 0, 1.0f, 1, 1}})[0], 0);
  std::vector<float> with_inf = test::random_floats(vocab);
  with_inf[33] = INFINITY;
  EXPECT_EQ(run_sample(with_inf, vocab, {{1.0f, 0, 1.0f, 1, 1}})[0], 33);
}

// The distribution the spec defines, in double: rank by logit, keep top_k, then the
// shortest prefix with mass >= top_p, renormalise. Returns -1 when the top-p cut
// falls within `margin` of a prefix boundary (float and double could disagree there).
std::vector<double> expected_distribution(const std::vector<float>& logits, float t, int top_k,
                                          float top_p, double margin) {
  const int vocab = int(logits.size());
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int k = top_k > 0 && top_k < vocab ? top_k : vocab;
  const double mx = logits[order[0]];
  std::vector<double> w(k);
  double total = 0;
  for (int r = 0; r < k; ++r) total += (w[r] = std::exp((double(logits[order[r]]) - mx) / t));
  int n = k;
  if (top_p < 1.0f) {
    double cum = 0;
    for (n = 0; n < k;) {
      cum += w[n++];
      if (std::fabs(cum / total - top_p) < margin) return {};
      if (cum >= top_p * total) break;
    }
  }
  double mass = 0;
  for (int r = 0; r < n; ++r) mass += w[r];
  std::vector<double> p(vocab, 0.0);
  for (int r = 0; r < n; ++r) p[order[r]] = w[r] / mass;
  return p;
}

struct DistCase {
  float temperature;
  int top_k;
  float top_p;
};

TEST_P(SampleCpu, FrequenciesFollowTheRestrictedSoftmax) {
  const int vocab = 40, batch = 25000, calls = 8, draws = batch * calls;
  for (DistCase dc : {DistCase{1.0f, 0, 1.0f}, DistCase{0.7f, 10, 1.0f}, DistCase{1.3f, 0, 0.8f},
                      DistCase{0.9f, 25, 0.6f}}) {
    std::vector<float> row;
    std::vector<double> p;
    while (p.empty()) {  // redraw logits whose top-p cut is ambiguous
      row = test::random_floats(vocab, -2.f, 2.f);
      p = expected_distribution(row, dc.temperature, dc.top_k, dc.top_p, 1e-4);
    }
    const std::vector<float> logits = repeat_row(row, batch);
    const uint64_t seed = test::rng()();
    std::vector<double> counts(vocab, 0);
    for (int c = 0; c < calls; ++c) {
      std::vector<RowParams> params(batch);
      for (int i = 0; i < batch; ++i)
        params[i] = {dc.temperature, dc.top_k, dc.top_p, seed, c * batch + i};
      for (int32_t tok : run_sample(logits, vocab, params)) counts[tok] += 1;
    }
    double chi2 = 0;
    int kept = 0;
    for (int i = 0; i < vocab; ++i) {
      if (p[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "token " << i << " is outside top-k/top-p but was drawn";
        continue;
      }
      ++kept;
      const double e = p[i] * draws;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    // Wilson-Hilferty: the chi-square quantile at z = 5 sd (p ~ 3e-7) for kept - 1 dof.
    const double dof = kept - 1;
    const double crit =
        dof > 0 ? dof * std::pow(1 - 2 / (9 * dof) + 5 * std::sqrt(2 / (9 * dof)), 3) : 0;
    EXPECT_LE(chi2, crit) << "T " << dc.temperature << " top_k " << dc.top_k << " top_p "
                          << dc.top_p << ": " << kept << " tokens kept";
    if (dc.top_k > 0) {
      EXPECT_LE(kept, dc.top_k);
    }
  }
}

// The race's noise (sampling.h R4): finite, and Gumbel-distributed -- mean the
// Euler-Mascheroni constant, variance pi^2 / 6 -- over fresh tokens, steps and seeds;
// and the key orders like l / T + noise.
TEST(SampleRace, NoiseIsFiniteAndGumbel) {
  const int n = 400000;
  const uint64_t seed = test::rng()();
  double sum = 0, sum2 = 0;
  int above_3 = 0;
  for (int i = 0; i < n; ++i) {
    const float g = sampling::race_noise(seed + uint64_t(i / 1000), i % 7, i);
    ASSERT_TRUE(std::isfinite(g)) << i;
    sum += g, sum2 += double(g) * g;
    above_3 += g > 3.0f;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  // Standard errors: mean ~0.002, variance ~0.0055 (Gumbel excess kurtosis 2.4).
  EXPECT_NEAR(mean, 0.5772156649, 0.012);
  EXPECT_NEAR(var, 1.6449340668, 0.035);
  // P(G > 3) = 1 - exp(-exp(-3)) = 0.04857.
  EXPECT_NEAR(double(above_3) / n, 0.04857, 0.0025);
  EXPECT_EQ(sampling::race_key(2.0f, 0.5f, 0.25f), 1.25f);
}

// R3's set test: rank 0 always, never a token of weight 0 or beyond top-k, and the
// top-p cut on the integer masses.
TEST(SampleRace, SetTestFollowsTheSpec) {
  const uint64_t one = 1ull << 40;
  EXPECT_TRUE(sampling::race_in_set(0, 0, one, 1, one, 0.0f));    // rank 0 with top_p 0
  EXPECT_FALSE(sampling::race_in_set(0, 0, 0, 5, one, 1.0f));     // weight 0
  EXPECT_FALSE(sampling::race_in_set(5, one, 1, 5, one, 1.0f));   // rank 5 with top_k 5
  EXPECT_TRUE(sampling::race_in_set(4, one, 1, 5, 4 * one, 1.0f));
  EXPECT_TRUE(sampling::race_in_set(3, 3 * one, 1, 10, 4 * one, 0.76f));   // 3 < 0.76 * 4
  EXPECT_FALSE(sampling::race_in_set(3, 3 * one, 1, 10, 4 * one, 0.75f));  // 3 == 0.75 * 4
  EXPECT_TRUE(sampling::race_in_set(3, 3 * one, 1, 10, 4 * one, NAN));     // NaN: top-p off
}

}  // namespace
}  // namespace lantern::kernels
