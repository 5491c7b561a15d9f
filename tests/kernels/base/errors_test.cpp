#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace lantern {

TEST(Common, StrformatAndErrors) {
  EXPECT_EQ(strformat("%s=%d", "layers", 16), "layers=16");
  try {
    LANTERN_CHECK(1 == 2, "value %d is wrong", 7);
    FAIL() << "LANTERN_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "value 7 is wrong");
  }
}

TEST(Bf16, RoundTripAndRounding) {
  for (float f : test::random_floats(1000, -100.f, 100.f)) {
    float r = bf16_to_float(float_to_bf16(f));
    EXPECT_LE(std::fabs(r - f), std::fabs(f) * (1.0f / 256.0f)) << f;
  }
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

}  // namespace lantern
