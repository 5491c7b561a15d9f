#pragma once
// One check for every CUPTI call, in the shape of kernels/base/cuda_check.h:
//   <call> failed: <CUPTI result name> (<its message>) at <file>:<line>[: <what to do>]
// (what to do: for the failures a user can fix).
#include <cupti.h>

#include <string>

namespace lantern::harness {

std::string cupti_error_message(CUptiResult result, const char* call, const char* file, int line);
[[noreturn]] void cupti_fail(CUptiResult result, const char* call, const char* file, int line);

// The result's name (for callbacks, which must not throw and record it instead).
const char* cupti_error_string(CUptiResult result);

}  // namespace lantern::harness

#define LANTERN_CUPTI(call)                                                      \
  do {                                                                           \
    CUptiResult lantern_cupti_result = (call);                                   \
    if (lantern_cupti_result != CUPTI_SUCCESS)                                   \
      ::lantern::harness::cupti_fail(lantern_cupti_result, #call, __FILE__, __LINE__); \
  } while (0)
