#pragma once
// Run-directory format version (see docs/run-format.md). Bump the major on
// any incompatible change; readers refuse newer majors with a clear error.
// Minor bumps only add fields: a reader ignores keys and columns it does not
// know, so a 1.x reader reads any 1.y run.
#include <string>

namespace lantern::runfmt {
constexpr int kRunFormatMajor = 1;
constexpr int kRunFormatMinor = 3;  // 1.1: kernels.csv launch configuration and occupancy; 1.2: timeline.bin;
                                   // 1.3: manifest experiment.kernel_variants
const char* run_format_version();  // "1.3"

struct FormatVersion {
  int major = 0, minor = 0;
};
// Parses "MAJOR.MINOR"; throws lantern::Error "<file>: ..." on anything else.
FormatVersion parse_format_version(const std::string& text, const std::string& file);
// Throws when `text` names a newer major than this build reads (the fix: a
// newer lantern), or is malformed.
FormatVersion check_format_version(const std::string& text, const std::string& file);
}  // namespace lantern::runfmt
