#include "harness/runfmt/schema.h"

#include <charconv>

#include "kernels/base/errors.h"

namespace lantern::runfmt {

const char* run_format_version() { return "1.3"; }

FormatVersion parse_format_version(const std::string& text, const std::string& file) {
  FormatVersion v;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(begin, end, v.major);
  bool ok = ec == std::errc() && p < end && *p == '.';
  if (ok) {
    auto [q, ec2] = std::from_chars(p + 1, end, v.minor);
    ok = ec2 == std::errc() && q == end && v.major >= 0 && v.minor >= 0;
  }
  LANTERN_CHECK(ok, "%s: format_version '%s' is not MAJOR.MINOR", file.c_str(), text.c_str());
  return v;
}

FormatVersion check_format_version(const std::string& text, const std::string& file) {
  FormatVersion v = parse_format_version(text, file);
  LANTERN_CHECK(v.major <= kRunFormatMajor,
                "%s: run format %s is newer than this lantern reads (%d.x): use a newer lantern",
                file.c_str(), text.c_str(), kRunFormatMajor);
  LANTERN_CHECK(v.major >= 1, "%s: run format %s predates format 1.0 and cannot be read",
                file.c_str(), text.c_str());
  return v;
}

}  // namespace lantern::runfmt
