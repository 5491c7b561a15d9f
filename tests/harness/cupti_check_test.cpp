// LANTERN_CUPTI's message has the shape of the CUDA check's (no GPU needed:
// CUPTI names its results without one).
#include "harness/cupti_check.h"

#include <string>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"

namespace lantern::harness {
namespace {

CUptiResult returns(CUptiResult r) { return r; }

TEST(CuptiCheck, MessageNamesCallResultDescriptionAndPlace) {
  const std::string m = cupti_error_message(CUPTI_ERROR_INVALID_PARAMETER, "cuptiX(a)", "c.cpp", 9);
  const std::string name = cupti_error_string(CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_NE(name, "unknown CUPTI error");
  const std::string head = "cuptiX(a) failed: " + name + " (";
  EXPECT_EQ(m.rfind(head, 0), 0u) << m;
  const std::string tail = ") at c.cpp:9";
  ASSERT_GT(m.size(), tail.size());
  EXPECT_EQ(m.substr(m.size() - tail.size()), tail) << m;
  EXPECT_GT(m.size(), head.size() + 12) << "a description between the parentheses: " << m;
}

TEST(CuptiCheck, FixableFailuresSayWhatToDo) {
  const std::string m =
      cupti_error_message(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "cuptiSubscribe(...)", "c.cpp", 1);
  EXPECT_NE(m.find("at c.cpp:1: another profiler (nsys, ncu) already uses CUPTI; run lantern with "
                   "--no-cupti under it"),
            std::string::npos)
      << m;
}

TEST(CuptiCheck, MacroThrowsAndSuccessPasses) {
  EXPECT_NO_THROW(LANTERN_CUPTI(returns(CUPTI_SUCCESS)));
  try {
    LANTERN_CUPTI(returns(CUPTI_ERROR_NOT_INITIALIZED));
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("returns(CUPTI_ERROR_NOT_INITIALIZED) failed: ", 0), 0u) << m;
    EXPECT_NE(m.find(__FILE__), std::string::npos) << m;
    EXPECT_NE(m.find("use --no-cupti or the cpu backend"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace lantern::harness
