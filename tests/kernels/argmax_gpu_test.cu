// argmax: every CUDA variant against the CPU reference; exact (an index).
// Rows with planted ties (lowest index wins), NaN (ranks below every number),
// all-NaN (-> 0), all -inf (-> 0), +inf, at vocab 128256 (float4 path) and an
// odd vocab of 1001 (scalar path), b = 1, 8, 64 and 1100; each variant twice
// on the same inputs (variant 3's per-row counters must be back at zero), and
// on two streams at once.
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

// Two streams running argmax at once (two engines in one process): variant
// 3's row counters are per stream, so interleaved launches on both still
// elect each row's last block of their own launch.
TEST(ArgmaxGpu, ConcurrentStreamsKeepTheirOwnRowCounters) {
  LANTERN_REQUIRE_GPU();
  const int b = 8, vocab = 128256, launches = 16;
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> logits[2];
  std::vector<int32_t> ref[2];
  for (int i = 0; i < 2; ++i) {
    logits[i].resize(size_t(b) * vocab);
    for (auto& x : logits[i]) x = normal(rng());
    ref[i].resize(b);
    launch(cpu_reference(Family::argmax), ArgmaxArgs{logits[i].data(), ref[i].data(), b, vocab}, cpu_ctx());
  }
  ASSERT_NE(ref[0], ref[1]) << "the two streams' inputs should give different answers";
  WorkspaceShape shape;
  shape.max_batch_tokens = shape.max_seqs = b;
  shape.vocab = vocab;
  for (const KernelEntry* e : cuda_variants(Family::argmax)) {
    if (e->name == std::string("seed")) continue;  // host round trips: nothing shared on the device
    SCOPED_TRACE(variant_label(*e));
    GpuEnv env[2];
    DeviceBuffer<float> d_logits[2] = {DeviceBuffer<float>(logits[0]), DeviceBuffer<float>(logits[1])};
    std::vector<DeviceBuffer<int32_t>> outs;
    for (int l = 0; l < 2 * launches; ++l) outs.emplace_back(b);
    LaunchCtx ctx[2] = {env[0].ctx(*e, shape), env[1].ctx(*e, shape)};
    for (int l = 0; l < launches; ++l)
      for (int i = 0; i < 2; ++i)  // no sync between: the streams overlap
        launch(*e, ArgmaxArgs{d_logits[i].get(), outs[2 * l + i].get(), b, vocab}, ctx[i]);
    env[0].sync(), env[1].sync();
    for (int l = 0; l < 2 * launches; ++l) EXPECT_EQ(outs[l].download(), ref[l % 2]) << "launch " << l;
  }
}

}  // namespace
}  // namespace lantern::test
