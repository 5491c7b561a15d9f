#pragma once
// kernels.csv: one row per GPU kernel (CUPTI) or per host-timed op (CPU
// backend). RFC 4180 quoting; a header row names the columns. Readers look
// columns up by name and ignore unknown ones (minor versions add columns).
#include <filesystem>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

const std::vector<std::string>& kernel_csv_columns();

void write_kernels_csv(const std::filesystem::path& path, const std::vector<KernelRow>& rows);
std::vector<KernelRow> parse_kernels_csv(const std::string& text,
                                         const std::string& file = "kernels.csv");

}  // namespace lantern::runfmt
