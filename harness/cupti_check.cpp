#include "harness/cupti_check.h"

#include "kernels/base/errors.h"

namespace lantern::harness {

const char* cupti_error_string(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || !text) return "unknown CUPTI error";
  return text;
}

namespace {

const char* cupti_error_detail(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetErrorMessage(result, &text) != CUPTI_SUCCESS || !text) return "no description";
  return text;
}

// What to do about the failures a user can cause or fix.
const char* cupti_hint(CUptiResult result) {
  switch (result) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return "another profiler (nsys, ncu) already uses CUPTI; run lantern with --no-cupti under it";
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "profiling needs permission (NVreg_RestrictProfilingToAdminUsers=0, or run as root)";
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INVALID_DEVICE:
      return "no usable CUDA driver/GPU; use --no-cupti or the cpu backend";
    default:
      return nullptr;
  }
}

}  // namespace

std::string cupti_error_message(CUptiResult result, const char* call, const char* file, int line) {
  std::string msg = strformat("%s failed: %s (%s) at %s:%d", call, cupti_error_string(result),
                              cupti_error_detail(result), file, line);
  if (const char* hint = cupti_hint(result)) msg += strformat(": %s", hint);
  return msg;
}

void cupti_fail(CUptiResult result, const char* call, const char* file, int line) {
  throw Error(cupti_error_message(result, call, file, line));
}

}  // namespace lantern::harness
