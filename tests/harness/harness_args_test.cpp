// The harness's command-line options (the rules behind harness/cli/harness_args).
#include "harness/harness_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"

namespace lantern::harness {
namespace {

using ::testing::HasSubstr;

TEST(HarnessOptions, Defaults) {
  HarnessOptions o = harness_options_from({}, {});
  EXPECT_TRUE(o.record_dir.empty());
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(o.nvtx && o.cupti && o.alias && o.kv && o.memory && o.roofline);
  EXPECT_EQ(o.profile_first, -1);
  EXPECT_EQ(o.profile_last, -1);
  EXPECT_EQ(o.cupti_config.kernel_every, 1);
  EXPECT_TRUE(o.cupti_config.windows()) << "CUPTI in budget windows by default";
  EXPECT_DOUBLE_EQ(o.cupti_config.window_budget, 0.015);
  EXPECT_EQ(o.cupti_config.window_period, 0);
  EXPECT_EQ(o.cupti_config.schedule(), "budget 1.5% (8-step windows)");
}

TEST(HarnessOptions, CuptiSchedules) {
  HarnessOptions all = harness_options_from({}, {"--cupti-all-steps"});
  EXPECT_FALSE(all.cupti_config.windows());
  EXPECT_EQ(all.cupti_config.schedule(), "all steps");
  HarnessOptions budget = harness_options_from({{"--cupti-budget", "0.5"}}, {});
  EXPECT_DOUBLE_EQ(budget.cupti_config.window_budget, 0.005);
  EXPECT_EQ(budget.cupti_config.schedule(), "budget 0.5% (8-step windows)");
  HarnessOptions every = harness_options_from({{"--cupti-every", "16"}}, {});
  EXPECT_FALSE(every.cupti_config.windows()) << "sampling keeps CUPTI attached";
  EXPECT_EQ(every.cupti_config.schedule(), "every 16");
  HarnessOptions fixed = harness_options_from({{"--cupti-window", "4:128"}}, {});
  EXPECT_TRUE(fixed.cupti_config.windows());
  EXPECT_EQ(fixed.cupti_config.schedule(), "windows 4:128");
}

TEST(HarnessOptions, EveryOption) {
  HarnessOptions o = harness_options_from(
      {{"--record", "runs/x"}, {"--name", "baseline"}, {"--profile-steps", "10:20"},
       {"--harness", "on"}, {"--cupti-every", "16"}},
      {"--no-cupti", "--no-nvtx", "--no-alias", "--no-kv", "--no-memory", "--no-roofline"});
  EXPECT_EQ(o.record_dir, "runs/x");
  EXPECT_EQ(o.name, "baseline");
  EXPECT_EQ(o.profile_first, 10);
  EXPECT_EQ(o.profile_last, 20);
  EXPECT_EQ(o.cupti_config.kernel_every, 16);
  EXPECT_FALSE(o.nvtx || o.cupti || o.alias || o.kv || o.memory || o.roofline);
  EXPECT_TRUE(o.enabled);
  EXPECT_FALSE(harness_options_from({{"--harness", "off"}}, {}).enabled);
  EXPECT_EQ(parse_profile_steps("7:7"), (std::pair<int, int>{7, 7}));
}

TEST(HarnessOptions, BadValuesNameTheOption) {
  auto error = [](std::map<std::string, std::string> values) {
    try {
      harness_options_from(values, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({{"--profile-steps", "10"}}), HasSubstr("--profile-steps expects A:B"));
  EXPECT_THAT(error({{"--profile-steps", "a:3"}}), HasSubstr("--profile-steps expects A:B"));
  EXPECT_THAT(error({{"--profile-steps", ":3"}}), HasSubstr("--profile-steps expects A:B"));
  EXPECT_THAT(error({{"--profile-steps", "5:2"}}), HasSubstr("the first step is after the last"));
  EXPECT_THAT(error({{"--harness", "maybe"}}), HasSubstr("--harness expects on or off"));
  EXPECT_THAT(error({{"--record", ""}}), HasSubstr("--record needs a directory"));
  HarnessOptions w = harness_options_from({{"--cupti-window", "4:128"}}, {});
  EXPECT_EQ(w.cupti_config.window_steps, 4);
  EXPECT_EQ(w.cupti_config.window_period, 128);
  for (const char* bad : {"0:4", "5:4", "4", ":4", "4:", "a:b", "4:8x", ""})
    EXPECT_THAT(error({{"--cupti-window", bad}}), HasSubstr("--cupti-window expects W:P")) << bad;
  EXPECT_THAT(error({{"--cupti-window", "2:8"}, {"--cupti-every", "4"}}),
              HasSubstr("exclude each other"));
  EXPECT_THAT(error({{"--cupti-budget", "2"}, {"--cupti-every", "4"}}), HasSubstr("exclude each other"));
  try {
    harness_options_from({{"--cupti-budget", "2"}}, {"--cupti-all-steps"});
    ADD_FAILURE() << "--cupti-budget with --cupti-all-steps accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("exclude each other"));
  }
  for (const char* bad : {"0", "-1", "100", "150", "x", "2%", ""})
    EXPECT_THAT(error({{"--cupti-budget", bad}}), HasSubstr("--cupti-budget expects a share of wall time"))
        << bad;
  for (const char* bad : {"0", "-3", "x", "4x", ""})
    EXPECT_THAT(error({{"--cupti-every", bad}}), HasSubstr("--cupti-every expects a positive step count"))
        << bad;
  EXPECT_THAT(harness_options_help(), HasSubstr("--profile-steps A:B"));
  EXPECT_THAT(harness_options_help(), HasSubstr("--cupti-every N"));
  EXPECT_THAT(harness_options_help(), HasSubstr("--cupti-budget PCT"));
  EXPECT_THAT(harness_options_help(), HasSubstr("--cupti-all-steps"));
}

}  // namespace
}  // namespace lantern::harness
