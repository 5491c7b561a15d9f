// sample, variant 0: the sampling algorithm of kernels/sampling.h, one row at a
// time (temperature, top-k, top-p, Philox draw from (seed, step)).
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

int32_t sample_row(const float* logits, int vocab, float temperature, int32_t top_k, float top_p,
                   uint64_t seed, int32_t step, SampleScratch& s) {
  const int32_t best = argmax_row_cpu(logits, vocab);
  const float max_logit = logits[best];  // largest non-NaN logit (NaN ranks last)
  if (sampling::is_greedy(temperature) || !sampling::max_is_usable(max_logit)) return best;

  // Rank order (sampling.h step 3). Only the first k ranks are needed.
  const int32_t k = sampling::candidate_count(top_k, vocab);
  s.order.resize(vocab);
  std::iota(s.order.begin(), s.order.end(), 0);
  auto before = [logits](int32_t a, int32_t b) {
    return sampling::ranks_before(logits[a], a, logits[b], b);
  };
  if (k < vocab) std::nth_element(s.order.begin(), s.order.begin() + k, s.order.end(), before);
  std::sort(s.order.begin(), s.order.begin() + k, before);

  s.weights.resize(k);
  for (int32_t r = 0; r < k; ++r)
    s.weights[r] = sampling::weight(logits[s.order[r]], max_logit, temperature);
  const float u = sampling::uniform01(seed, step);
  return s.order[sampling::pick_rank(s.weights.data(), k, top_p, u)];
}

void sample_cpu(const SampleArgs& a, const LaunchCtx&) {
#pragma omp parallel if (a.b > 1)
  {
    SampleScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int r = 0; r < a.b; ++r)
      a.out[r] = sample_row(a.logits + size_t(r) * a.vocab, a.vocab, a.temperature[r], a.top_k[r],
                            a.top_p[r], a.seeds[r], a.steps[r], scratch);
  }
}

}  // namespace

void register_sample_cpu(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cpu, sample_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: rank sort, top-k, top-p, Philox inverse CDF (kernels/sampling.h)"));
}

}  // namespace lantern::kernels
