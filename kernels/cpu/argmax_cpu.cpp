// argmax, variant 0: index of the largest logit per row.
//
// Ties go to the lowest index; NaN is smaller than every number, so a row of all
// NaN returns 0 (sampling::argmax_better, shared with the CUDA variants).
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sampling.h"

namespace lantern::kernels {

// Shared with sample_cpu.cpp (greedy rows).
int32_t argmax_row_cpu(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (sampling::argmax_better(logits[i], i, logits[best], best)) best = i;
  return best;
}

namespace {

void argmax_cpu(const ArgmaxArgs& a, const LaunchCtx&) {
#pragma omp parallel for schedule(static) if (a.b > 1)
  for (int r = 0; r < a.b; ++r) a.out[r] = argmax_row_cpu(a.logits + size_t(r) * a.vocab, a.vocab);
}

}  // namespace

void register_argmax_cpu(Registry& r) {
  r.add(make_entry<ArgmaxArgs, argmax_cpu, argmax_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: sequential scan, lowest index wins ties"));
}

}  // namespace lantern::kernels
