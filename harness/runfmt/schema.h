#pragma once
// Run-directory format version (see docs/run-format.md). Bump the major on
// any incompatible change; readers refuse newer majors with a clear error.
namespace lantern::runfmt {
constexpr int kRunFormatMajor = 1;
constexpr int kRunFormatMinor = 0;
const char* run_format_version();  // "1.0"
}  // namespace lantern::runfmt
