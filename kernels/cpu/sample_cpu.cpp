// sample, variant 0: the sampling algorithm of kernels/sampling.h, one row at a
// time (temperature, top-k, top-p, Philox draw from (seed, step)); variant 8:
// the race (sampling.h R1-R4), the reference of sample.7 grid_race.
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {

// Scratch reused across rows of one call: [vocab] indices, [k] weights.
struct SampleScratch {
  std::vector<int32_t> order;
  std::vector<float> weights;
};

// Rank order (sampling.h step 3) of the first k ranks into order[0, k).
void rank_first_k(const float* logits, int vocab, int32_t k, std::vector<int32_t>& order) {
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto before = [logits](int32_t a, int32_t b) {
    return sampling::ranks_before(logits[a], a, logits[b], b);
  };
  if (k < vocab) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  std::sort(order.begin(), order.begin() + k, before);
}

int32_t sample_row(const float* logits, int vocab, float temperature, int32_t top_k, float top_p,
                   uint64_t seed, int32_t step, SampleScratch& s) {
  const int32_t best = argmax_row_cpu(logits, vocab);
  const float max_logit = logits[best];  // largest non-NaN logit (NaN ranks last)
  if (sampling::is_greedy(temperature) || !sampling::max_is_usable(max_logit)) return best;
  const int32_t k = sampling::candidate_count(top_k, vocab);
  rank_first_k(logits, vocab, k, s.order);

  s.weights.resize(k);
  for (int32_t r = 0; r < k; ++r)
    s.weights[r] = sampling::weight(logits[s.order[r]], max_logit, temperature);
  const float u = sampling::uniform01(seed, step);
  return s.order[sampling::pick_rank(s.weights.data(), k, top_p, u)];
}

// sampling.h R1-R4 taken literally: the rank order, the fixed-point prefix
// masses, the set N, and the largest Gumbel key over N.
int32_t race_row(const float* logits, int vocab, float temperature, int32_t top_k, float top_p,
                 uint64_t seed, int32_t step, SampleScratch& s) {
  const int32_t best = argmax_row_cpu(logits, vocab);
  const float max_logit = logits[best];
  if (sampling::is_greedy(temperature) || !sampling::max_is_usable(max_logit)) return best;
  const int32_t k = sampling::candidate_count(top_k, vocab);
  rank_first_k(logits, vocab, k, s.order);  // the set lies within the first k ranks
  const float inv_temp = 1.0f / temperature;
  uint64_t top_k_mass = 0;
  for (int32_t r = 0; r < k; ++r)
    top_k_mass += sampling::race_fixed_weight(logits[s.order[r]], max_logit, inv_temp);
  int32_t pick = best;
  float pick_key = -INFINITY;
  uint64_t mass_before = 0;
  for (int32_t r = 0; r < k; ++r) {
    const int32_t t = s.order[r];
    const uint64_t w = sampling::race_fixed_weight(logits[t], max_logit, inv_temp);
    if (sampling::race_in_set(uint64_t(r), mass_before, w, k, top_k_mass, top_p)) {
      const float key = sampling::race_key(logits[t], inv_temp, sampling::race_noise(seed, step, t));
      if (key > pick_key || (key == pick_key && t < pick)) pick = t, pick_key = key;
    }
    mass_before += w;
  }
  return pick;
}

template <int32_t (*Row)(const float*, int, float, int32_t, float, uint64_t, int32_t, SampleScratch&)>
void sample_rows_cpu(const SampleArgs& a, const LaunchCtx&) {
#pragma omp parallel if (a.b > 1)
  {
    SampleScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int r = 0; r < a.b; ++r)
      a.out[r] = Row(a.logits + size_t(r) * a.vocab, a.vocab, a.temperature[r], a.top_k[r],
                     a.top_p[r], a.seeds[r], a.steps[r], scratch);
  }
}

void sample_cpu(const SampleArgs& a, const LaunchCtx& ctx) { sample_rows_cpu<sample_row>(a, ctx); }
void sample_race_cpu(const SampleArgs& a, const LaunchCtx& ctx) { sample_rows_cpu<race_row>(a, ctx); }

}  // namespace

void register_sample_cpu(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cpu, sample_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: rank sort, top-k, top-p, Philox inverse CDF (kernels/sampling.h)"));
  // Tested only: the CPU backend keeps the inverse CDF as its default.
  r.add(make_entry<SampleArgs, sample_race_cpu, sample_cost<4>>(
      8, "cpu_race", Backend::cpu,
      "reference of the race (kernels/sampling.h R1-R4): rank sort, fixed-point prefix masses, "
      "the largest Gumbel key over the top-k / top-p set",
      kTestedOnly));
}

}  // namespace lantern::kernels
