#pragma once
// Shared test helpers: GPU presence, tiny synthetic models, random inputs.
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lantern::test {

// True when a CUDA device is usable; `reason` says why not otherwise.
bool gpu_available(std::string* reason = nullptr);

// Path of the repo's tests/ folder and of a per-build scratch folder.
std::filesystem::path test_data_dir();
std::filesystem::path scratch_dir(const std::string& name);  // created fresh, per process

// A fresh seed per process unless LANTERN_TEST_SEED is set; printed once so a
// failure can be replayed.
uint64_t test_seed();
std::mt19937_64& rng();
std::vector<float> random_floats(size_t n, float lo = -1.f, float hi = 1.f);

// Relative L2 error ||a - b|| / ||b||.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);

// Expect |a - ref| <= atol + rtol * |ref| element-wise; prints the first few
// mismatches (llm.c's validate_result).
::testing::AssertionResult all_close(const std::vector<float>& a, const std::vector<float>& ref,
                                     double atol, double rtol);

}  // namespace lantern::test

#define LANTERN_REQUIRE_GPU()                                              \
  do {                                                                     \
    std::string lantern_gpu_reason;                                        \
    if (!::lantern::test::gpu_available(&lantern_gpu_reason))              \
      GTEST_SKIP() << "no usable CUDA GPU: " << lantern_gpu_reason;        \
  } while (0)

// GPU tests of the engine's observer hooks: a GPU, and hooks compiled in.
#if LANTERN_INSTRUMENTATION
#define LANTERN_REQUIRE_GPU_AND_HOOKS() LANTERN_REQUIRE_GPU()
#else
#define LANTERN_REQUIRE_GPU_AND_HOOKS() \
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)"
#endif
