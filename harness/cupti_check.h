#pragma once
// One check for every CUPTI call: throws lantern::Error naming the call,
// file:line, the CUPTI error and, for the common cases, what to do.
#include <cupti.h>

namespace lantern::harness {

[[noreturn]] void cupti_fail(CUptiResult result, const char* call, const char* file, int line);

// The message cupti_fail would throw (for callbacks, which must not throw).
const char* cupti_error_string(CUptiResult result);

}  // namespace lantern::harness

#define LANTERN_CUPTI(call)                                                      \
  do {                                                                           \
    CUptiResult lantern_cupti_result = (call);                                   \
    if (lantern_cupti_result != CUPTI_SUCCESS)                                   \
      ::lantern::harness::cupti_fail(lantern_cupti_result, #call, __FILE__, __LINE__); \
  } while (0)
