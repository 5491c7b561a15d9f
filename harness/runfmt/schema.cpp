#include "harness/runfmt/schema.h"

namespace lantern::runfmt {
const char* run_format_version() { return "1.0"; }
}  // namespace lantern::runfmt
