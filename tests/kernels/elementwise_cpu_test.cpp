// CPU reference: embedding, swiglu and residual against their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& cpu_ref(Family f) {
  return Registry::global().find(f, "cpu_ref");
}

TEST(EmbeddingCpu, GathersRowsExactly) {
  const int vocab = 997, hidden = 67, n = 40;
  std::vector<bf16_bits> table(size_t(vocab) * hidden);
  const std::vector<float> values = test::random_floats(table.size(), -4.f, 4.f);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float_to_bf16(values[i]);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  for (auto& id : ids) id = pick(test::rng());
  ids[0] = 0;
  ids[1] = vocab - 1;
  ids[2] = ids[3];  // repeated id
  std::vector<float> out(size_t(n) * hidden, NAN);
  launch(cpu_ref(Family::embedding),
         EmbeddingArgs{ids.data(), table.data(), out.data(), n, hidden, vocab}, LaunchCtx{});
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < hidden; ++j)
      ASSERT_EQ(out[size_t(i) * hidden + j], bf16_to_float(table[size_t(ids[i]) * hidden + j]))
          << "row " << i << " col " << j;
}

TEST(EmbeddingCpu, RejectsOutOfRangeIds) {
  const int vocab = 8, hidden = 4;
  std::vector<bf16_bits> table(vocab * hidden, 0);
  std::vector<float> out(hidden);
  for (int32_t bad : {-1, vocab}) {
    EXPECT_THROW(
        launch(cpu_ref(Family::embedding),
               EmbeddingArgs{&bad, table.data(), out.data(), 1, hidden, vocab}, LaunchCtx{}),
        Error);
  }
}

TEST(SwigluCpu, MatchesSiluTimesUp) {
  const int n = 9, inter = 301;
  std::vector<float> gate = test::random_floats(size_t(n) * inter, -12.f, 12.f);
  const std::vector<float> up = test::random_floats(gate.size(), -3.f, 3.f);
  // Extremes: exp(-g) overflows for very negative g and must give 0, not NaN.
  gate[0] = -200.f;
  gate[1] = 200.f;
  gate[2] = 0.f;
  std::vector<float> out(gate.size(), NAN), ref(gate.size());
  for (size_t i = 0; i < gate.size(); ++i)
    ref[i] = float(double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i]);
  launch(cpu_ref(Family::swiglu), SwigluArgs{gate.data(), up.data(), out.data(), n, inter},
         LaunchCtx{});
  // float exp, divide, multiply: a few ulps.
  EXPECT_TRUE(test::all_close(out, ref, 1e-30, 1e-6));
}

TEST(SwigluCpu, MayWriteOverGate) {
  const int n = 3, inter = 50;
  std::vector<float> gate = test::random_floats(size_t(n) * inter, -5.f, 5.f);
  const std::vector<float> up = test::random_floats(gate.size());
  std::vector<float> separate(gate.size());
  launch(cpu_ref(Family::swiglu), SwigluArgs{gate.data(), up.data(), separate.data(), n, inter},
         LaunchCtx{});
  launch(cpu_ref(Family::swiglu), SwigluArgs{gate.data(), up.data(), gate.data(), n, inter},
         LaunchCtx{});
  EXPECT_EQ(std::memcmp(gate.data(), separate.data(), gate.size() * sizeof(float)), 0);
}

TEST(ResidualCpu, AddsInPlace) {
  // Large enough to take the threaded path as well.
  for (size_t count : {size_t(1), size_t(1000), size_t(200000)}) {
    std::vector<float> x = test::random_floats(count, -10.f, 10.f);
    const std::vector<float> y = test::random_floats(count, -10.f, 10.f);
    std::vector<float> ref(count);
    for (size_t i = 0; i < count; ++i) ref[i] = x[i] + y[i];  // one rounding, same as the kernel
    launch(cpu_ref(Family::residual), ResidualArgs{x.data(), y.data(), count}, LaunchCtx{});
    EXPECT_TRUE(test::all_close(x, ref, 0, 0)) << count;
  }
}

}  // namespace
}  // namespace lantern::kernels
