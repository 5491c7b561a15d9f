// embedding, variant 0: gather rows of the bf16 table and widen them to float.
#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void embedding_cpu(const EmbeddingArgs& a, const LaunchCtx&) {
  const auto* table = static_cast<const bf16_bits*>(a.table);  // [vocab, hidden]
  auto* out = static_cast<float*>(a.out);                      // [n, hidden]
  // Checked up front: an out-of-range id would read outside the weight block.
  for (int i = 0; i < a.n; ++i)
    LANTERN_CHECK(a.ids[i] >= 0 && a.ids[i] < a.vocab,
                  "embedding: token id %d at row %d is outside [0, %d)", a.ids[i], i, a.vocab);
#pragma omp parallel for schedule(static) if (a.n > 1)
  for (int i = 0; i < a.n; ++i) {
    const bf16_bits* src = table + size_t(a.ids[i]) * a.hidden;
    float* dst = out + size_t(i) * a.hidden;
    for (int j = 0; j < a.hidden; ++j) dst[j] = bf16_to_float(src[j]);
  }
}

}  // namespace

void register_embedding_cpu(Registry& r) {
  r.add(make_entry<EmbeddingArgs, embedding_cpu, embedding_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: row gather, bf16 widened to float"));
}

}  // namespace lantern::kernels
