// sample: every CUDA variant against the CPU reference (kernels/sampling.h).
// The same token is required, except where sampling.h allows a difference:
// sums taken in another order can move the draw only when the target lies
// within float rounding of a boundary between the two ranks (or at the top-p
// cut, which then moves the target). Such a mismatch is accepted only if,
// recomputed in double, the GPU's token is the draw to within the reference's own
// float rounding, max(1e-4, 2 (k + 16) 2^-24) of the candidates' mass, for the
// exact top-p cut or one within that rounding of P * S (it is reported). Also: two launches give the same tokens, and two
// rows with the same logits, seed and step draw the same token.
// Rows cover greedy (T = 0 and NaN), top-k 1 / 50 / 1024 (one-thread path) /
// 1025 and 2000 (parallel path), top-p 0 / 0.5 / 0.9 / 0.95, the full vocab,
// NaN logits, and more than 16 rows (several sort batches); vocab 128256.
// Then: fresh random rows over a grid of parameters, with bf16-rounded logits
// (many exact ties) and near-flat rows (bins too full for shared memory: the
// bisection path of bin_select); and a chi-square test of the empirical token
// distribution over many seeds against the restricted softmax in double;
// sample.4 against sample.3 token for token (the same decisions by design).
// The race (sample.7 grid_race, and sample.9 grid_race_early, the same keys
// made in another order) is compared with its own reference, sample.8
// cpu_race (sampling.h R1-R4), with near_tie_race's tolerance, over every layout
// it has (grid rows in shared memory or re-read, one block per row, odd
// vocabularies and unaligned rows), and goes through the same chi-square test.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/sampling.h"
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
};

// Rounds to the nearest bfloat16 (ties to even), as a bf16 LM head's logits are.
float bf16_round(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

// Every token id in rank order (sampling.h step 3).
std::vector<int32_t> rank_order(const float* logits, int vocab) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sampling::ranks_before(logits[a], a, logits[b], b);
  });
  return order;
}

// True when `got` may differ from `want` only through summation order.
bool near_tie(const float* logits, int vocab, const RowParams& p, uint64_t seed, int32_t step,
              int32_t want, int32_t got, std::string* why) {
  const std::vector<int32_t> order = rank_order(logits, vocab);
  const float m = logits[order[0]];
  const int32_t k = sampling::candidate_count(p.top_k, vocab);
  std::vector<double> cum(k + 1, 0.0);
  for (int32_t r = 0; r < k; ++r)
    cum[r + 1] = cum[r] + sampling::weight(logits[order[r]], m, p.temperature);
  int32_t n = k;
  if (sampling::top_p_active(p.top_p)) {
    n = 1;
    while (n < k && cum[n] < p.top_p * cum[k]) ++n;
  }
  const double u = double(sampling::uniform01(seed, step)), target = u * cum[n];
  const int32_t rw = int32_t(std::find(order.begin(), order.end(), want) - order.begin());
  const int32_t rg = int32_t(std::find(order.begin(), order.end(), got) - order.begin());
  // The reference sums k floats one after another: its rounding can reach about
  // k * 2^-24 of the mass (and the GPU's sums differ again), so a boundary that
  // close to the target may fall either way, and so may the top-p cut: every
  // nucleus size n' whose C_n' lies within tol of P * S is possible, and it moves
  // the target to u * C_n'. `got` is accepted when, for one possible n', its rank
  // lies within tol of being the draw.
  const double tol = std::max(1e-4, 2.0 * (k + 16) * std::ldexp(1.0, -24)) * cum[k];
  std::vector<int32_t> sizes = {n};
  if (sampling::top_p_active(p.top_p))
    for (int32_t j = 1; j <= k; ++j)
      if (j != n && std::fabs(cum[j] - p.top_p * cum[k]) <= tol) sizes.push_back(j);
  bool ok = false;
  for (int32_t n2 : sizes) {
    const double t2 = u * cum[n2];
    ok = ok || (rg < n2 && cum[rg] <= t2 + tol && cum[rg + 1] > t2 - tol);
  }
  *why = "ranks " + std::to_string(rw) + " (cpu) vs " + std::to_string(rg) + " (gpu), target " +
         std::to_string(target) + " of mass " + std::to_string(cum[n]) + ", " +
         std::to_string(sizes.size()) + " possible top-p cuts";
  return ok;
}

// The race's tokens may differ from cpu_race's only through host vs device
// logf / exp2f in the last ulp: recomputed in double, `got` must be in the set
// with the top-p cut loosened by 1e-5 of S, and its key within 1e-5 of the
// largest key over the set with the cut tightened by as much.
bool near_tie_race(const float* logits, int vocab, const RowParams& p, uint64_t seed, int32_t step,
                   int32_t want, int32_t got, std::string* why) {
  const std::vector<int32_t> order = rank_order(logits, vocab);
  const float m = logits[order[0]], inv_t = 1.0f / p.temperature;
  const int32_t k = sampling::candidate_count(p.top_k, vocab);
  std::vector<double> w(k), cum(k + 1, 0.0);
  for (int32_t r = 0; r < k; ++r) {
    w[r] = double(sampling::race_fixed_weight(logits[order[r]], m, inv_t));
    cum[r + 1] = cum[r] + w[r];
  }
  const double tol = 1e-5;
  auto in_set = [&](int32_t r, double slack) {
    if (r >= k || w[r] <= 0.0) return false;
    return r == 0 || !sampling::top_p_active(p.top_p) || cum[r] < double(p.top_p) * cum[k] * (1.0 + slack);
  };
  auto key = [&](int32_t t) {
    return double(logits[t]) * double(inv_t) + double(sampling::race_noise(seed, step, t));
  };
  double best = -INFINITY;
  for (int32_t r = 0; r < k; ++r)
    if (in_set(r, -tol)) best = std::max(best, key(order[r]));
  const int32_t rw = int32_t(std::find(order.begin(), order.end(), want) - order.begin());
  const int32_t rg = int32_t(std::find(order.begin(), order.end(), got) - order.begin());
  *why = "ranks " + std::to_string(rw) + " (cpu) vs " + std::to_string(rg) + " (gpu), keys " +
         std::to_string(key(want)) + " vs " + std::to_string(key(got)) + ", best " + std::to_string(best);
  return in_set(rg, tol) && key(got) >= best - tol * std::max(1.0, std::fabs(best));
}

bool is_race(const KernelEntry& e) { return std::string(e.name).find("race") != std::string::npos; }
// The CPU variant a CUDA variant must match: its algorithm's reference.
const KernelEntry& reference_of(const KernelEntry& e) {
  return is_race(e) ? Registry::global().find(Family::sample, "cpu_race") : cpu_reference(Family::sample);
}
bool near_tie_for(const KernelEntry& e, const float* logits, int vocab, const RowParams& p, uint64_t seed,
                  int32_t step, int32_t want, int32_t got, std::string* why) {
  return is_race(e) ? near_tie_race(logits, vocab, p, seed, step, want, got, why)
                    : near_tie(logits, vocab, p, seed, step, want, got, why);
}

TEST(SampleGpu, MatchesReferenceTokens) {
  LANTERN_REQUIRE_GPU();
  const int vocab = 128256;
  const std::vector<RowParams> kinds = {
      {0.0f, 0, 1.0f},   {NAN, 50, 0.9f},    {0.7f, 50, 1.0f},    {1.0f, 50, 0.9f},
      {0.8f, 0, 0.95f},  {1.0f, 2000, 1.0f}, {1.5f, 0, 1.0f},     {1.0f, 1, 0.5f},
      {1.0f, 10, 0.0f},  {2.0f, 1024, 0.8f}, {2.0f, 1025, 0.8f},  {0.6f, 0, 0.5f}};
  std::vector<RowParams> params;
  for (int rep = 0; rep < 2; ++rep) params.insert(params.end(), kinds.begin(), kinds.end());
  const int b = int(params.size()) + 1;  // + a duplicate of row 4 (same seed, step, logits)
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> logits(size_t(b) * vocab);
  for (auto& x : logits) x = normal(rng());
  for (int i = 0; i < 50; ++i) logits[size_t(3) * vocab + i * 7] = NAN;  // NaN logits in a row
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, steps;
  std::vector<uint64_t> seeds;
  for (const RowParams& p : params) {
    temperature.push_back(p.temperature), top_k.push_back(p.top_k), top_p.push_back(p.top_p);
    seeds.push_back(rng()()), steps.push_back(int32_t(rng()() % 1000));
  }
  std::copy_n(logits.begin() + size_t(4) * vocab, vocab, logits.begin() + size_t(b - 1) * vocab);
  temperature.push_back(temperature[4]), top_k.push_back(top_k[4]), top_p.push_back(top_p[4]);
  seeds.push_back(seeds[4]), steps.push_back(steps[4]);
  params.push_back(params[4]);

  DeviceBuffer<float> d_logits(logits), d_t(temperature), d_p(top_p);
  DeviceBuffer<int32_t> d_k(top_k), d_steps(steps), d_out(b);
  DeviceBuffer<uint64_t> d_seeds(seeds);
  GpuEnv env;
  WorkspaceShape shape;
  shape.max_batch_tokens = shape.max_seqs = b;
  shape.vocab = vocab;
  for (const KernelEntry* e : cuda_variants(Family::sample)) {
    SCOPED_TRACE(variant_label(*e));
    std::vector<int32_t> ref(b);
    launch(reference_of(*e),
           SampleArgs{logits.data(), temperature.data(), top_k.data(), top_p.data(), seeds.data(),
                      steps.data(), ref.data(), b, vocab},
           cpu_ctx());
    const SampleArgs args{d_logits.get(), d_t.get(), d_k.get(), d_p.get(), d_seeds.get(),
                          d_steps.get(), d_out.get(), b, vocab};
    d_out.poison();
    launch(*e, args, env.ctx(*e, shape));
    env.sync();
    const std::vector<int32_t> got = d_out.download();
    for (int r = 0; r < b; ++r) {
      if (got[r] == ref[r]) continue;
      std::string why;
      const bool tie = near_tie_for(*e, logits.data() + size_t(r) * vocab, vocab, params[r], seeds[r],
                                    steps[r], ref[r], got[r], &why);
      EXPECT_TRUE(tie) << "row " << r << ": cpu " << ref[r] << ", gpu " << got[r] << " (" << why << ")";
      if (tie) std::printf("[sample] row %d accepted as a rounding tie: %s\n", r, why.c_str());
    }
    EXPECT_EQ(got[b - 1], got[4]) << "same logits, seed and step must draw the same token";
    d_out.poison();
    launch(*e, args, env.ctx(*e, shape));
    env.sync();
    EXPECT_EQ(d_out.download(), got) << "a second launch drew different tokens";
  }
}

// Uploads the rows, runs the CPU reference and every CUDA variant, and checks
// that every mismatch is a near tie. Returns the tokens of each variant.
struct Batch {
  std::vector<float> logits, temperature, top_p;
  std::vector<int32_t> top_k, steps;
  std::vector<uint64_t> seeds;
  std::vector<RowParams> params;
  void add(const RowParams& p, uint64_t seed, int32_t step) {
    params.push_back(p), temperature.push_back(p.temperature), top_k.push_back(p.top_k);
    top_p.push_back(p.top_p), seeds.push_back(seed), steps.push_back(step);
  }
};

// One row of a test kind: 0 normal(0, 2); 1 bf16-rounded normal(0, 3) (exact
// ties everywhere); 2 near-flat (every logit within 1e-3 of 1: the bisection
// paths); 3 normal with one logit raised by 12 (peaked: the set is one or two
// tokens); 4 normal with vocab / 50 NaN and -inf logits.
void fill_row(float* row, int vocab, int kind, std::uniform_int_distribution<int>& pick) {
  std::normal_distribution<float> normal(0.f, kind == 1 ? 3.f : 2.f);
  std::uniform_real_distribution<float> flat(1.f, 1.001f);
  for (int i = 0; i < vocab; ++i) {
    const float x = kind == 2 ? flat(rng()) : normal(rng());
    row[i] = kind == 1 ? bf16_round(x) : x;
  }
  if (kind == 3) row[pick(rng()) % vocab] += 12.0f;
  if (kind == 4)
    for (int i = 0; i < vocab / 50; ++i) row[pick(rng()) % vocab] = i % 2 ? NAN : -INFINITY;
}

// The tokens variant e draws for the rows of `in` (one launch).
std::vector<int32_t> draw(const KernelEntry& e, const Batch& in, int vocab, GpuEnv& env) {
  const int b = int(in.params.size());
  DeviceBuffer<float> d_logits(in.logits), d_t(in.temperature), d_p(in.top_p);
  DeviceBuffer<int32_t> d_k(in.top_k), d_steps(in.steps), d_out(b);
  DeviceBuffer<uint64_t> d_seeds(in.seeds);
  WorkspaceShape shape;
  shape.max_batch_tokens = shape.max_seqs = b;
  shape.vocab = vocab;
  d_out.poison();
  launch(e, SampleArgs{d_logits.get(), d_t.get(), d_k.get(), d_p.get(), d_seeds.get(), d_steps.get(), d_out.get(),
                       b, vocab},
         env.ctx(e, shape));
  env.sync();
  return d_out.download();
}

void expect_variants_match_reference(const Batch& in, int vocab, int* ties,
                                     const std::vector<const KernelEntry*>& variants = cuda_variants(Family::sample)) {
  const int b = int(in.params.size());
  GpuEnv env;
  std::vector<int32_t> refs[2];  // per algorithm: [0] the inverse CDF, [1] the race
  for (const KernelEntry* e : variants) {
    SCOPED_TRACE(variant_label(*e));
    std::vector<int32_t>& ref = refs[is_race(*e)];
    if (ref.empty()) {
      ref.resize(b);
      launch(reference_of(*e),
             SampleArgs{in.logits.data(), in.temperature.data(), in.top_k.data(), in.top_p.data(),
                        in.seeds.data(), in.steps.data(), ref.data(), b, vocab},
             cpu_ctx());
    }
    const std::vector<int32_t> got = draw(*e, in, vocab, env);
    for (int r = 0; r < b; ++r) {
      if (got[r] == ref[r]) continue;
      std::string why;
      const bool tie = near_tie_for(*e, in.logits.data() + size_t(r) * vocab, vocab, in.params[r],
                                    in.seeds[r], in.steps[r], ref[r], got[r], &why);
      EXPECT_TRUE(tie) << "row " << r << ": cpu " << ref[r] << ", gpu " << got[r] << " (" << why << ")";
      *ties += tie;
      if (tie) std::printf("[sample] %s row %d accepted as a rounding tie: %s\n", variant_label(*e).c_str(), r, why.c_str());
    }
  }
}

TEST(SampleGpu, MatchesReferenceOnRandomGridTiesAndFlatRows) {
  LANTERN_REQUIRE_GPU();
  const int vocab = 128256;
  const float temps[] = {1e-3f, 0.5f, 0.8f, 1.0f, 1.7f};
  const int32_t ks[] = {0, 1, 2, 40, 50, 700, 5000};
  const float ps[] = {1.0f, 0.95f, 0.6f, 0.1f};
  Batch in;
  std::uniform_int_distribution<int> pick(0, 1 << 30);
  const int rows = 96;
  in.logits.resize(size_t(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    // Kinds: normal(0, 2); bf16-rounded normal(0, 3) (exact ties everywhere);
    // near-flat (every logit within 1e-3 of 1: all tokens share a few bins).
    const int kind = r % 3;
    std::normal_distribution<float> normal(0.f, kind == 1 ? 3.f : 2.f);
    std::uniform_real_distribution<float> flat(1.f, 1.001f);
    float* row = in.logits.data() + size_t(r) * vocab;
    for (int i = 0; i < vocab; ++i) {
      float x = kind == 2 ? flat(rng()) : normal(rng());
      if (kind == 1) x = bf16_round(x);
      row[i] = x;
    }
    in.add({temps[pick(rng()) % 5], ks[pick(rng()) % 7], ps[pick(rng()) % 4]}, rng()(),
           int32_t(pick(rng()) % 5000));
  }
  int ties = 0;
  expect_variants_match_reference(in, vocab, &ties);
  std::printf("[sample] %d rows x %zu variants: %d accepted rounding ties\n", rows,
              cuda_variants(Family::sample).size(), ties);
}

// sample.4 (cluster_gather), sample.5 (cluster_lean) and sample.6 (grid_gather)
// decide every crossing from the same bins, weights and integer prefixes as
// sample.3 (cluster_select): the same token on every row, not just up to
// rounding ties. Batches 1 (8 blocks per row for sample.4, 16 for sample.5,
// sm_count for sample.6), 2, 4 and 16 (sample.6's other register layouts), 8
// and 20 (8 blocks; sample.6 hands 20 to sample.5) and 40 (4 blocks); normal, bf16-rounded (ties), near-flat (the bisection path) and
// peaked rows (a large top logit: the nucleus is one or two tokens), over a grid
// that includes the engine's settings (T 0.8, top_k 50 + top_p 0.9, top_p 0.95).
TEST(SampleGpu, ClusterGatherDrawsClusterSelectsTokens) {
  LANTERN_REQUIRE_GPU();
  const int vocab = 128256;
  const KernelEntry& select = Registry::global().find(Family::sample, "cluster_select");
  const KernelEntry& gather = Registry::global().find(Family::sample, "cluster_gather");
  const KernelEntry& lean = Registry::global().find(Family::sample, "cluster_lean");
  const KernelEntry& grid = Registry::global().find(Family::sample, "grid_gather");
  const float temps[] = {0.0f, 1e-3f, 0.5f, 0.8f, 1.0f, 1.7f};
  const int32_t ks[] = {0, 1, 2, 40, 50, 700, 5000};
  const float ps[] = {1.0f, 0.95f, 0.9f, 0.6f, 0.1f, 0.0f};
  std::uniform_int_distribution<int> pick(0, 1 << 30);
  GpuEnv env;
  int rows_checked = 0;
  for (int b : {1, 2, 4, 8, 16, 20, 40}) {
    for (int rep = 0; rep < (b == 1 ? 12 : b == 20 ? 1 : 2); ++rep) {
      Batch in;
      in.logits.resize(size_t(b) * vocab);
      for (int r = 0; r < b; ++r) {
        fill_row(in.logits.data() + size_t(r) * vocab, vocab, (r + rep) % 4, pick);
        RowParams p{temps[pick(rng()) % 6], ks[pick(rng()) % 7], ps[pick(rng()) % 6]};
        if (r % 5 == 0) p = RowParams{0.8f, 50, 0.9f};
        if (r % 5 == 1) p = RowParams{0.8f, 0, 0.95f};
        in.add(p, rng()(), int32_t(pick(rng()) % 5000));
      }
      std::vector<int32_t> tokens[4];
      int v = 0;
      for (const KernelEntry* e : {&select, &gather, &lean, &grid}) tokens[v++] = draw(*e, in, vocab, env);
      for (int r = 0; r < b; ++r)
        for (int w = 1; w < 4; ++w)
          EXPECT_EQ(tokens[w][r], tokens[0][r])
              << (w == 1 ? "cluster_gather" : w == 2 ? "cluster_lean" : "grid_gather") << " b=" << b << " row " << r << " (T "
              << in.params[r].temperature << ", top_k " << in.params[r].top_k << ", top_p "
              << in.params[r].top_p << ", kind " << (r + rep) % 4 << ")";
      rows_checked += b;
    }
  }
  std::printf("[sample] cluster_gather == cluster_lean == grid_gather == cluster_select on %d rows\n",
              rows_checked);
}

// Upper quantile of chi-square(dof) at z standard deviations (Wilson-Hilferty).
double chi2_quantile(int dof, double z) {
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Each variant draws in launches of 96 rows, so the cluster variants run their
// own kernels (4 blocks per row), not bin_select.
TEST(SampleGpu, FrequenciesFollowTheRestrictedSoftmax) {
  LANTERN_REQUIRE_GPU();
  const int vocab = 4096, rows = 32768;
  // The last two are the engine's settings (top_k 50 + top_p 0.9; top_p 0.95 alone).
  const RowParams cases[] = {{0.9f, 200, 0.9f}, {1.3f, 0, 1.0f}, {0.7f, 20, 1.0f},
                             {0.8f, 50, 0.9f}, {0.8f, 0, 0.95f}};
  std::normal_distribution<float> normal(0.f, 1.5f);
  std::vector<float> row(vocab);
  for (auto& x : row) x = normal(rng());
  for (const RowParams& p : cases) {
    SCOPED_TRACE("T=" + std::to_string(p.temperature) + " top_k=" + std::to_string(p.top_k) +
                 " top_p=" + std::to_string(p.top_p));
    // Reference probabilities in double: rank order, top-k, top-p, normalise.
    const std::vector<int32_t> order = rank_order(row.data(), vocab);
    const int k = sampling::candidate_count(p.top_k, vocab);
    std::vector<double> w(k);
    double total = 0;
    for (int r = 0; r < k; ++r) total += w[r] = std::exp(double(row[order[r]] - row[order[0]]) / p.temperature);
    int n = k;
    if (sampling::top_p_active(p.top_p)) {
      double c = 0;
      for (n = 0; n < k;) { c += w[n++]; if (c >= p.top_p * total) break; }
    }
    double mass = 0;
    for (int r = 0; r < n; ++r) mass += w[r];
    std::vector<double> prob(vocab, 0.0);
    for (int r = 0; r < n; ++r) prob[order[r]] = w[r] / mass;

    Batch in;
    in.logits.resize(size_t(rows) * vocab);
    for (int r = 0; r < rows; ++r) {
      std::copy(row.begin(), row.end(), in.logits.begin() + size_t(r) * vocab);
      in.add(p, 1000003ull * uint64_t(r) + 17, r % 7);  // a fresh (seed, step) per row
    }
    DeviceBuffer<float> d_logits(in.logits), d_t(in.temperature), d_p(in.top_p);
    DeviceBuffer<int32_t> d_k(in.top_k), d_steps(in.steps), d_out(rows);
    DeviceBuffer<uint64_t> d_seeds(in.seeds);
    GpuEnv env;
    WorkspaceShape shape;
    shape.max_batch_tokens = shape.max_seqs = rows;
    shape.vocab = vocab;
    std::vector<std::pair<const KernelEntry*, int>> runs;
    for (const KernelEntry* e : cuda_variants(Family::sample)) {
      // In launches of 96 rows: the batch size at which the cluster variants
      // run their own kernel (from 128 rows they hand over to bin_select); the
      // race also in launches of 4 rows (its grid layout: many blocks per row).
      runs.push_back({e, 96});
      if (is_race(*e)) runs.push_back({e, 4});
    }
    for (const auto& [e, chunk] : runs) {
      SCOPED_TRACE(variant_label(*e) + " in launches of " + std::to_string(chunk) + " rows");
      for (int r0 = 0; r0 < rows; r0 += chunk) {
        const int n = std::min(chunk, rows - r0);
        launch(*e, SampleArgs{d_logits.get() + size_t(r0) * vocab, d_t.get() + r0, d_k.get() + r0,
                              d_p.get() + r0, d_seeds.get() + r0, d_steps.get() + r0,
                              d_out.get() + r0, n, vocab},
               env.ctx(*e, shape));
      }
      env.sync();
      std::vector<double> count(vocab, 0.0);
      int outside = 0;
      for (int32_t t : d_out.download()) {
        ASSERT_TRUE(t >= 0 && t < vocab) << "token " << t;
        count[t] += 1;
        outside += prob[t] == 0.0;
      }
      EXPECT_EQ(outside, 0) << "tokens drawn outside the top-k / top-p set";
      // Categories with >= 5 expected draws; the rest of the set pooled into one.
      double chi2 = 0, pooled_e = 0, pooled_o = 0;
      int cats = 0;
      for (int i = 0; i < vocab; ++i) {
        if (prob[i] == 0.0) continue;
        const double e_i = prob[i] * rows;
        if (e_i >= 5.0) {
          chi2 += (count[i] - e_i) * (count[i] - e_i) / e_i;
          ++cats;
        } else {
          pooled_e += e_i, pooled_o += count[i];
        }
      }
      if (pooled_e >= 5.0) chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e, ++cats;
      ASSERT_GE(cats, 2);
      // z = 4.75: a false alarm about once in a million runs per check.
      const double limit = chi2_quantile(cats - 1, 4.75);
      std::printf("[sample] %s (%d-row launches) n=%d: chi2 %.1f over %d categories (limit %.1f)\n",
                  variant_label(*e).c_str(), chunk, n, chi2, cats, limit);
      EXPECT_LT(chi2, limit);
    }
  }
}

// The race in every layout it has, against cpu_race: b = 1 (32 blocks per row,
// slices in shared memory), 5 and 16 (fewer blocks), 40 (3 blocks, slices too
// large for shared memory: re-read), 150 (one block per row, no grid barrier);
// an odd vocabulary (unaligned rows: scalar loads, a partial group of 4) and a
// small one. Rows: normal, bf16-rounded (ties), near-flat, peaked, and with NaN
// and -inf logits; parameters over greedy, top-k 1 / 50 / 5000, top-p 0 / 0.6 /
// 0.9 / 0.95 and both together. Then two launches must agree, and sample.9
// (grid_race_early: the noise made before the dependency wait) must draw
// sample.7's tokens exactly.
TEST(SampleGpu, RaceMatchesCpuRaceInEveryLayout) {
  LANTERN_REQUIRE_GPU();
  const KernelEntry& race = Registry::global().find(Family::sample, "grid_race");
  const KernelEntry& early = Registry::global().find(Family::sample, "grid_race_early");
  const RowParams kinds[] = {{0.8f, 50, 0.9f}, {0.8f, 0, 0.95f}, {1.0f, 0, 1.0f},  {0.0f, 0, 1.0f},
                             {0.7f, 1, 1.0f},  {1.2f, 5000, 0.6f}, {0.5f, 0, 0.0f}, {1.5f, 50, 1.0f},
                             {0.8f, 2, 0.9f},  {2.0f, 700, 0.95f}};
  std::uniform_int_distribution<int> pick(0, 1 << 30);
  int rows_checked = 0, ties = 0;
  const std::pair<int, int> layouts[] = {{128256, 1}, {128256, 5}, {128256, 16}, {128256, 40},
                                         {128256, 150}, {50001, 1}, {50001, 7}, {1000, 3}};
  for (const auto& [vocab, b] : layouts) {
    SCOPED_TRACE("vocab " + std::to_string(vocab) + ", b " + std::to_string(b));
    for (int rep = 0; rep < (b < 16 ? 6 : 1); ++rep) {
      Batch in;
      in.logits.resize(size_t(b) * vocab);
      for (int r = 0; r < b; ++r) {
        fill_row(in.logits.data() + size_t(r) * vocab, vocab, (r + rep) % 5, pick);
        in.add(kinds[(r + 3 * rep) % 10], rng()(), int32_t(pick(rng()) % 5000));
      }
      expect_variants_match_reference(in, vocab, &ties, {&race, &early});
      rows_checked += b;
      // Determinism: two more launches of the same rows; sample.9 makes the same keys as sample.7.
      GpuEnv env;
      const std::vector<int32_t> first = draw(race, in, vocab, env);
      EXPECT_EQ(first, draw(race, in, vocab, env)) << "two launches drew different tokens";
      EXPECT_EQ(draw(early, in, vocab, env), first) << "sample.9 (early noise) drew other tokens than sample.7";
    }
  }
  std::printf("[sample] grid_race == cpu_race on %d rows (%d accepted rounding ties)\n", rows_checked, ties);
}

}  // namespace
}  // namespace lantern::test
