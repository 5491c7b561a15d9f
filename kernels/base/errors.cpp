#include "kernels/base/errors.h"

#include <cstdarg>
#include <vector>

namespace lantern {

std::string strformat(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

void throw_error(const char* file, int line, const std::string& msg) {
  throw Error(strformat("%s (%s:%d)", msg.c_str(), file, line));
}

}  // namespace lantern
