// embedding: every CUDA variant against the CPU reference. A pure gather, so the
// result must be bit-exact (tolerance 0). Shapes: Llama-3.2-1B (vocab 128256,
// hidden 2048) with n = 1, 7 and 512, ids at both ends of the vocabulary, and an
// odd hidden (scalar path).
#include "kernels/base/cuda_check.h"
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_embedding(int n, int hidden, int vocab) {
  const std::vector<bf16_bits> table = random_bf16_bits_fast(size_t(vocab) * hidden);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  for (auto& id : ids) id = pick(rng());
  ids[0] = vocab - 1;
  if (n > 1) ids[1] = 0;
  std::vector<float> ref(size_t(n) * hidden);
  launch(cpu_reference(Family::embedding), EmbeddingArgs{ids.data(), table.data(), ref.data(), n, hidden, vocab},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_table(table);
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<bf16_bits> d_out(size_t(n) * hidden);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::embedding)) {
    SCOPED_TRACE(variant_label(*e) + " n=" + std::to_string(n) + " hidden=" + std::to_string(hidden));
    d_out.poison();
    launch(*e, EmbeddingArgs{d_ids.get(), d_table.get(), d_out.get(), n, hidden, vocab},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_out.download()), ref, 0, 0, 0));
  }
}

TEST(EmbeddingGpu, MatchesReferenceAtModelShapes) {
  LANTERN_REQUIRE_GPU();
  for (int n : {1, 7, 512}) check_embedding(n, 2048, 128256);
}

TEST(EmbeddingGpu, SmallOddHiddenScalarPath) {
  LANTERN_REQUIRE_GPU();
  check_embedding(5, 100, 1000);
}

}  // namespace
}  // namespace lantern::test
