// CPU reference: argmax, with ties (lowest index) and NaN (below every number).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

std::vector<int32_t> run_argmax(const std::vector<float>& logits, int b, int vocab) {
  std::vector<int32_t> out(b, -7);
  launch(Registry::global().find(Family::argmax, "cpu_ref"),
         ArgmaxArgs{logits.data(), out.data(), b, vocab}, LaunchCtx{});
  return out;
}

TEST(ArgmaxCpu, MatchesFirstMaximumOnRandomRows) {
  const int b = 9, vocab = 5003;
  const std::vector<float> logits = test::random_floats(size_t(b) * vocab, -30.f, 30.f);
  const std::vector<int32_t> out = run_argmax(logits, b, vocab);
  for (int r = 0; r < b; ++r) {
    const float* row = &logits[size_t(r) * vocab];
    EXPECT_EQ(out[r], std::max_element(row, row + vocab) - row) << "row " << r;
  }
}

TEST(ArgmaxCpu, TiesGoToTheLowestIndex) {
  const int vocab = 100;
  std::vector<float> logits = test::random_floats(vocab, -1.f, 1.f);
  logits[71] = 5.f;
  logits[13] = 5.f;
  logits[90] = 5.f;
  EXPECT_EQ(run_argmax(logits, 1, vocab)[0], 13);
  std::vector<float> flat(vocab, 0.25f);
  EXPECT_EQ(run_argmax(flat, 1, vocab)[0], 0);
}

TEST(ArgmaxCpu, NanIsSmallerThanEveryNumber) {
  const int vocab = 6;
  // Rows: NaN first; NaN around the max; all NaN; -inf and NaN; +inf.
  const std::vector<float> logits = {NAN, 1,         2,        NAN,       -3,       0,    //
                                     -1,  NAN,       7,        NAN,       7,        NAN,  //
                                     NAN, NAN,       NAN,      NAN,       NAN,      NAN,  //
                                     NAN, -INFINITY, NAN,      -INFINITY, NAN,      NAN,  //
                                     1,   NAN,       INFINITY, 3,         INFINITY, 2};
  EXPECT_EQ(run_argmax(logits, 5, vocab), (std::vector<int32_t>{2, 2, 0, 1, 2}));
}

}  // namespace
}  // namespace lantern::kernels
