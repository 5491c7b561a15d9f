// argmax: every CUDA variant against the CPU reference; exact (an index).
// Rows with planted ties (lowest index wins), NaN (ranks below every number),
// all-NaN (-> 0), all -inf (-> 0), +inf, at vocab 128256 (float4 path) and an
// odd vocab of 1001 (scalar path), b = 1, 8, 64 and 1100; each variant twice
// on the same inputs (variant 3's per-row counters must be back at zero).
#include <cmath>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_argmax(int b, int vocab) {
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> logits(size_t(b) * vocab);
  for (auto& x : logits) x = normal(rng());
  auto row = [&](int r) { return logits.data() + size_t(r) * vocab; };
  if (b >= 8) {
    row(1)[vocab - 1] = 100.f, row(1)[5] = 100.f;                         // tie: 5 wins
    for (int i = 0; i < vocab; ++i) row(2)[i] = NAN;                      // all NaN: 0
    for (int i = 0; i < vocab; ++i) row(3)[i] = -INFINITY;                // all -inf: 0
    row(4)[0] = NAN, row(4)[vocab / 2] = 50.f;                            // NaN never wins
    row(5)[vocab - 2] = INFINITY;                                         // +inf
    for (int i = 0; i < vocab; ++i) row(6)[i] = 1.5f;                     // all equal: 0
    row(7)[vocab - 1] = 60.f;                                             // last index
  }
  std::vector<int32_t> ref(b);
  launch(cpu_reference(Family::argmax), ArgmaxArgs{logits.data(), ref.data(), b, vocab}, cpu_ctx());
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<int32_t> d_out(b);
  GpuEnv env;
  WorkspaceShape shape;
  shape.max_batch_tokens = shape.max_seqs = b;
  shape.vocab = vocab;
  for (const KernelEntry* e : cuda_variants(Family::argmax)) {
    SCOPED_TRACE(variant_label(*e) + " b=" + std::to_string(b) + " vocab=" + std::to_string(vocab));
    for (int run = 0; run < 2; ++run) {  // twice: variant 3's row counters are reset by each launch
      d_out.poison();
      launch(*e, ArgmaxArgs{d_logits.get(), d_out.get(), b, vocab}, env.ctx(*e, shape));
      env.sync();
      EXPECT_EQ(d_out.download(), ref) << "launch " << run + 1;
    }
  }
}

TEST(ArgmaxGpu, MatchesReferenceWithTiesAndNaN) {
  LANTERN_REQUIRE_GPU();
  for (int b : {1, 8, 64}) check_argmax(b, 128256);
}

TEST(ArgmaxGpu, SmallOddVocab) {
  LANTERN_REQUIRE_GPU();
  check_argmax(8, 1001);
  check_argmax(1100, 1001);  // more rows than variant 3 has counters: its fallback (variant 2)
}

}  // namespace
}  // namespace lantern::test
