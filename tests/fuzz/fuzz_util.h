#pragma once
// Shared by the libFuzzer targets: a private scratch folder per process and
// the rule every target checks — bad input throws lantern::Error (a one-line
// message), nothing else: any other exception, a crash or a sanitizer report
// is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/base/errors.h"

namespace lantern::fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    auto d = std::filesystem::path(base ? base : "/tmp") /
             ("lantern-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(),
                                                              static_cast<std::streamsize>(bytes.size()));
}

// Errors must be one line: a message with a newline breaks the CLI's contract.
inline void check_message(const Error& e) {
  std::string_view m = e.what();
  if (m.empty() || m.find('\n') != std::string_view::npos || m.size() > 2000) {
    std::fprintf(stderr, "bad error message (%zu bytes): %.300s\n", m.size(), e.what());
    std::abort();
  }
}

// Runs `f`, accepting only success or lantern::Error.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    check_message(e);
  }
}

// Splits `data` at `sep` into at most `n` parts (the last takes the rest).
inline std::vector<std::string_view> split(std::string_view data, std::string_view sep, size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    size_t at = data.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + sep.size());
  }
  parts.push_back(data);
  return parts;
}

}  // namespace lantern::fuzz
