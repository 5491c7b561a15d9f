#pragma once
// Errors and checks shared by every Lantern library: the CUDA-free part of the
// base layer (kernels/base/cuda_check.h is the CUDA part).
//
// Every failure a user can cause (bad files, bad configs, bad limits) throws
// lantern::Error with ONE line that names the problem and, where there is one,
// the fix. Internal invariants use LANTERN_ASSERT (also an Error, so tests and
// the CLI report them instead of aborting).
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace lantern {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style formatting into a std::string.
std::string strformat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace lantern

// Throw a one-line user-facing error (no file:line: it is about the input).
#define LANTERN_FAIL(...) throw ::lantern::Error(::lantern::strformat(__VA_ARGS__))

// Check a user-facing condition.
#define LANTERN_CHECK(cond, ...) \
  do {                           \
    if (!(cond)) LANTERN_FAIL(__VA_ARGS__); \
  } while (0)

// Internal invariant: failure is a Lantern bug; message carries file:line.
#define LANTERN_ASSERT(cond, ...)                                                    \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::lantern::throw_error(__FILE__, __LINE__,                                     \
                             std::string("internal check failed: " #cond " — ") +    \
                                 ::lantern::strformat(__VA_ARGS__));                 \
  } while (0)
