#include "harness/runfmt/kernels_csv.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "kernels/base/errors.h"
#include "harness/runfmt/json_util.h"

namespace lantern::runfmt {

const std::vector<std::string>& kernel_csv_columns() {
  static const std::vector<std::string> columns = {
      "launch", "step",   "phase",    "layer",   "op",       "family",      "variant",
      "variant_name", "kernel", "source", "device", "stream", "start_us",    "dur_us",
      "bytes",  "flops",  "gb_per_s", "tflop_per_s", "pct_roofline", "graph_node", "correlation"};
  return columns;
}

namespace {

void put_field(std::string& line, const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) {
    line += s;
    return;
  }
  line += '"';
  for (char c : s) {
    if (c == '"') line += '"';
    line += c;
  }
  line += '"';
}

std::string num(double x) { return detail::shortest(x); }
std::string opt(const std::optional<double>& x) { return x ? num(*x) : std::string(); }

// Splits CSV text into records of fields (quoted fields may hold commas,
// quotes and newlines).
std::vector<std::vector<std::string>> split_csv(const std::string& text, const std::string& file) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, field_started = false;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"') {
      LANTERN_CHECK(field.empty(), "%s: line %zu: stray quote inside a field", file.c_str(), line);
      quoted = true;
      field_started = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
      field_started = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (field_started || !field.empty() || !fields.empty()) {
        fields.push_back(std::move(field));
        records.push_back(std::move(fields));
      }
      fields.clear();
      field.clear();
      field_started = false;
      ++line;
    } else {
      field += c;
      field_started = true;
    }
  }
  LANTERN_CHECK(!quoted, "%s: unterminated quoted field at the end of the file", file.c_str());
  if (field_started || !field.empty() || !fields.empty()) {
    fields.push_back(std::move(field));
    records.push_back(std::move(fields));
  }
  return records;
}

}  // namespace

void write_kernels_csv(const std::filesystem::path& path, const std::vector<KernelRow>& rows) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  LANTERN_CHECK(out.good(), "cannot write %s (%s)", path.c_str(), std::strerror(errno));
  std::string line;
  for (size_t i = 0; i < kernel_csv_columns().size(); ++i) {
    if (i) line += ',';
    line += kernel_csv_columns()[i];
  }
  out << line << "\n";
  for (const KernelRow& r : rows) {
    line.clear();
    auto sep = [&] { line += ','; };
    auto text = [&](const std::string& s) {
      put_field(line, s);
      sep();
    };
    auto raw = [&](const std::string& s) {
      line += s;
      sep();
    };
    raw(std::to_string(r.launch));
    raw(std::to_string(r.step));
    text(r.phase);
    raw(std::to_string(r.layer));
    text(r.op);
    text(r.family);
    raw(std::to_string(r.variant));
    text(r.variant_name);
    text(r.kernel);
    text(r.source);
    raw(std::to_string(r.device));
    raw(std::to_string(r.stream));
    raw(num(r.start_us));
    raw(num(r.dur_us));
    raw(num(r.bytes));
    raw(num(r.flops));
    raw(opt(r.gb_per_s));
    raw(opt(r.tflop_per_s));
    raw(opt(r.pct_roofline));
    raw(std::to_string(r.graph_node));
    line += std::to_string(r.correlation);
    out << line << "\n";
  }
  out.close();
  LANTERN_CHECK(out.good(), "writing %s failed (%s)", path.c_str(), std::strerror(errno));
}

std::vector<KernelRow> parse_kernels_csv(const std::string& text, const std::string& file) {
  auto records = split_csv(text, file);
  LANTERN_CHECK(!records.empty(), "%s: empty file (expected a header row)", file.c_str());
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < records[0].size(); ++i) col[records[0][i]] = i;
  for (const char* required : {"step", "layer", "op", "family", "kernel", "source", "start_us",
                               "dur_us", "bytes", "flops"})
    LANTERN_CHECK(col.count(required), "%s: header lacks the column '%s'", file.c_str(), required);

  std::vector<KernelRow> rows;
  rows.reserve(records.size() - 1);
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& f = records[r];
    LANTERN_CHECK(f.size() == records[0].size(), "%s: row %zu has %zu fields, the header has %zu",
                  file.c_str(), r, f.size(), records[0].size());
    auto text_of = [&](const char* name) -> std::string {
      auto it = col.find(name);
      return it == col.end() ? std::string() : f[it->second];
    };
    auto number = [&](const char* name, double fallback) -> double {
      std::string s = text_of(name);
      if (s.empty()) return fallback;
      char* end = nullptr;
      double x = std::strtod(s.c_str(), &end);
      LANTERN_CHECK(end && *end == '\0', "%s: row %zu: column %s is not a number: '%s'",
                    file.c_str(), r, name, s.c_str());
      return x;
    };
    auto integer = [&](const char* name, long long fallback) -> long long {
      std::string s = text_of(name);
      if (s.empty()) return fallback;
      char* end = nullptr;
      long long x = std::strtoll(s.c_str(), &end, 10);
      LANTERN_CHECK(end && *end == '\0', "%s: row %zu: column %s is not an integer: '%s'",
                    file.c_str(), r, name, s.c_str());
      return x;
    };
    auto unsigned_integer = [&](const char* name) -> unsigned long long {
      std::string s = text_of(name);
      if (s.empty()) return 0;
      char* end = nullptr;
      unsigned long long x = std::strtoull(s.c_str(), &end, 10);
      LANTERN_CHECK(end && *end == '\0' && s[0] != '-',
                    "%s: row %zu: column %s is not an unsigned integer: '%s'", file.c_str(), r,
                    name, s.c_str());
      return x;
    };
    auto optional = [&](const char* name) -> std::optional<double> {
      if (text_of(name).empty()) return std::nullopt;
      return number(name, 0);
    };
    KernelRow k;
    k.launch = integer("launch", -1);
    k.step = integer("step", -1);
    k.phase = text_of("phase");
    k.layer = static_cast<int>(integer("layer", -1));
    k.op = text_of("op");
    k.family = text_of("family");
    k.variant = static_cast<int>(integer("variant", -1));
    k.variant_name = text_of("variant_name");
    k.kernel = text_of("kernel");
    k.source = text_of("source");
    k.device = static_cast<int>(integer("device", 0));
    k.stream = static_cast<int>(integer("stream", 0));
    k.start_us = number("start_us", 0);
    k.dur_us = number("dur_us", 0);
    k.bytes = number("bytes", 0);
    k.flops = number("flops", 0);
    k.gb_per_s = optional("gb_per_s");
    k.tflop_per_s = optional("tflop_per_s");
    k.pct_roofline = optional("pct_roofline");
    k.graph_node = unsigned_integer("graph_node");
    k.correlation = static_cast<uint32_t>(unsigned_integer("correlation"));
    rows.push_back(std::move(k));
  }
  return rows;
}

}  // namespace lantern::runfmt
