#include "tests/test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <unistd.h>

namespace lantern::test {

std::filesystem::path test_data_dir() { return LANTERN_TEST_DATA_DIR; }

std::filesystem::path scratch_dir(const std::string& name) {
  // Per process: ctest runs each test in its own process, several at once,
  // and two tests sharing a name must not delete each other's files.
  auto p = std::filesystem::path(LANTERN_BINARY_DIR) / "test-scratch" /
           (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

uint64_t test_seed() {
  static uint64_t seed = [] {
    const char* env = std::getenv("LANTERN_TEST_SEED");
    uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::fprintf(stderr, "[lantern-test] random seed %llu (set LANTERN_TEST_SEED to replay)\n",
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(test_seed());
  return g;
}

std::vector<float> random_floats(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (a.size() != b.size()) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

::testing::AssertionResult all_close(const std::vector<float>& a, const std::vector<float>& ref,
                                     double atol, double rtol) {
  if (a.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << a.size() << " != " << ref.size();
  std::ostringstream msg;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = atol + rtol * std::fabs(ref[i]);
    if (!(std::fabs(double(a[i]) - double(ref[i])) <= tol)) {  // NaN fails
      if (bad < 5) msg << "\n  [" << i << "] got " << a[i] << " expected " << ref[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ" << msg.str();
}

}  // namespace lantern::test
