#pragma once
// Experiment knobs (docs/kernels.md, "experiment knobs"): integers read from
// the environment for docs/performance.md's measurements, not settings. Each
// caller reads its knob once (a function-local static) and validates it.
#include <cstdlib>

namespace lantern::kernels {

// The integer value of environment variable `name` (std::atoi: 0 when it is
// not a number), or `unset` when the variable is absent.
inline int env_int(const char* name, int unset = 0) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : unset;
}

}  // namespace lantern::kernels
