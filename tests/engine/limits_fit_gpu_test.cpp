// Limits that cannot fit in GPU memory are refused before any allocation,
// with the free device memory and the largest max_batch_tokens that fits in
// the message; that suggestion then builds an engine (issue 15).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

TEST(LimitsFitGpu, TooLargeForTheDeviceSaysWhatFitsAndThatFits) {
  LANTERN_REQUIRE_GPU();
  const auto dir = test::synth_tiny("limits-fit-gpu", 5);
  ModelConfig cfg = ModelConfig::load(dir);
  auto build = [&](int max_batch_tokens) {
    EngineOptions opt;
    opt.backend = kernels::Backend::cuda;
    opt.limits.max_batch_tokens = max_batch_tokens;
    opt.limits.max_seqs = 16;
    opt.limits.max_context = 256;
    opt.limits.kv_num_blocks = 1024;
    return Engine(cfg, Weights::load(cfg, dir, kernels::Backend::cuda), opt);
  };
  std::string message;
  try {
    build(1 << 30);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_THAT(message, ::testing::HasSubstr("limit max_batch_tokens=1073741824 needs a"));
  EXPECT_THAT(message, ::testing::HasSubstr("the device memory free after the weights holds"));
  auto at = message.find("max_batch_tokens <= ");
  ASSERT_NE(at, std::string::npos) << message;
  // Half the suggestion leaves room for the KV pool and workspaces.
  const int fits = std::stoi(message.substr(at + 20));
  EXPECT_GT(fits, 4096);
  EXPECT_NO_THROW(build(fits / 2));
}

}  // namespace
}  // namespace lantern
