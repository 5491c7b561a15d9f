#pragma once
// A seeded random stream whose draws are the same on every machine and
// standard library (std::normal_distribution and friends are not: their
// algorithms are implementation-defined), so a workload drawn from a seed is
// the same workload everywhere.
#include <cmath>
#include <cstdint>

namespace lantern::experiment {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed ^ 0x6a09e667f3bcc909ull) {}

  uint64_t next_u64() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive); modulo bias is below 2^-40 for
  // the ranges used here.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next_u64() % static_cast<uint64_t>(hi - lo + 1));
  }
  // Standard normal by Box-Muller (one value per call; the pair's second
  // value is dropped to keep the stream position simple).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  // Exponential with the given rate (mean 1/rate).
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

 private:
  uint64_t state_;
};

}  // namespace lantern::experiment
