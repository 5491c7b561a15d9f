// The harness's shared command-line options.
#include "harness/cli/harness_args.h"

#include "engine/common.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lantern::cli {
namespace {

using ::testing::HasSubstr;

Args parse(std::vector<std::string> argv) {
  std::vector<std::string> values = {"--model"}, flags = {"--quiet"};
  add_harness_options(values, flags);
  return Args(std::move(argv), values, flags);
}

TEST(HarnessArgs, Defaults) {
  harness::HarnessOptions o = parse_harness_options(parse({"--model", "m"}));
  EXPECT_TRUE(o.record_dir.empty());
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(o.nvtx && o.cupti && o.alias && o.kv && o.memory && o.roofline);
  EXPECT_EQ(o.profile_first, -1);
  EXPECT_EQ(o.profile_last, -1);
}

TEST(HarnessArgs, EveryOption) {
  harness::HarnessOptions o = parse_harness_options(
      parse({"--record", "runs/x", "--name", "baseline", "--profile-steps", "10:20", "--no-cupti",
             "--no-nvtx", "--no-alias", "--no-kv", "--no-memory", "--no-roofline", "--harness=on"}));
  EXPECT_EQ(o.record_dir, "runs/x");
  EXPECT_EQ(o.name, "baseline");
  EXPECT_EQ(o.profile_first, 10);
  EXPECT_EQ(o.profile_last, 20);
  EXPECT_FALSE(o.nvtx || o.cupti || o.alias || o.kv || o.memory || o.roofline);
  EXPECT_TRUE(o.enabled);
  EXPECT_FALSE(parse_harness_options(parse({"--harness", "off"})).enabled);
}

TEST(HarnessArgs, BadValuesNameTheOption) {
  auto error = [](std::vector<std::string> argv) {
    try {
      parse_harness_options(parse(std::move(argv)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({"--profile-steps", "10"}), HasSubstr("--profile-steps expects A:B"));
  EXPECT_THAT(error({"--profile-steps", "a:3"}), HasSubstr("--profile-steps expects A:B"));
  EXPECT_THAT(error({"--profile-steps", "5:2"}), HasSubstr("the first step is after the last"));
  EXPECT_THAT(error({"--harness", "maybe"}), HasSubstr("--harness expects on or off"));
  EXPECT_THAT(harness_options_help(), HasSubstr("--profile-steps A:B"));
}

}  // namespace
}  // namespace lantern::cli
