#include "harness/runfmt/kernels_csv.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "kernels/base/errors.h"
#include "harness/runfmt/json_util.h"

namespace lantern::runfmt {

const std::vector<std::string>& kernel_csv_columns() {
  static const std::vector<std::string> columns = {
      "launch", "step",   "phase",    "layer",   "op",       "family",      "variant",
      "variant_name", "kernel", "source", "device", "stream", "start_us",    "dur_us",
      "bytes",  "flops",  "gb_per_s", "tflop_per_s", "pct_roofline", "graph_node", "correlation",
      // 1.1: launch configuration and occupancy
      "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs_per_thread",
      "static_smem_bytes", "dynamic_smem_bytes", "smem_config_bytes", "blocks_per_sm",
      "occupancy", "waves", "occupancy_limit"};
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

// One row's fields, each followed by a comma except the last.
class RowWriter {
 public:
  explicit RowWriter(std::string& line) : line_(line) {}
  void text(const std::string& s) {
    sep();
    put_field(line_, s);
  }
  void raw(const std::string& s) {
    sep();
    line_ += s;
  }
  void integer(long long x) { raw(std::to_string(x)); }
  void number(double x) { raw(num(x)); }
  void optional(const std::optional<double>& x) { raw(opt(x)); }

 private:
  std::string& line_;
  bool first_ = true;
  void sep() {
    if (!first_) line_ += ',';
    first_ = false;
  }
};

void write_launch(RowWriter& w, const LaunchConfig& c, const std::optional<Occupancy>& o) {
  const bool known = c.known();
  for (long long x : {c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z})
    known ? w.integer(x) : w.raw("");
  for (long long x : {static_cast<long long>(c.regs_per_thread), static_cast<long long>(c.static_smem),
                      static_cast<long long>(c.dynamic_smem), static_cast<long long>(c.smem_config)})
    known ? w.integer(x) : w.raw("");
  o ? w.integer(o->blocks_per_sm) : w.raw("");
  w.optional(o ? std::optional<double>(o->occupancy) : std::nullopt);
  w.optional(o ? std::optional<double>(o->waves) : std::nullopt);
  w.text(o ? o->limit : std::string());
}

void write_row(std::string& line, const KernelRow& r) {
  RowWriter w(line);
  w.integer(r.launch);
  w.integer(r.step);
  w.text(r.phase);
  w.integer(r.layer);
  w.text(r.op);
  w.text(r.family);
  w.integer(r.variant);
  w.text(r.variant_name);
  w.text(r.kernel);
  w.text(r.source);
  w.integer(r.device);
  w.integer(r.stream);
  w.number(r.start_us);
  w.number(r.dur_us);
  w.number(r.bytes);
  w.number(r.flops);
  w.optional(r.gb_per_s);
  w.optional(r.tflop_per_s);
  w.optional(r.pct_roofline);
  w.raw(std::to_string(r.graph_node));
  w.raw(std::to_string(r.correlation));
  write_launch(w, r.launch_config, r.occupancy);
}

// Field access by column name for one row; a missing column or an empty
// field gives the fallback (older minor versions lack columns).
class RowReader {
 public:
  RowReader(const std::map<std::string, size_t>& col, const std::vector<std::string>& fields,
            const std::string& file, size_t row)
      : col_(col), fields_(fields), file_(file), row_(row) {}
  std::string text(const char* name) const {
    auto it = col_.find(name);
    return it == col_.end() ? std::string() : fields_[it->second];
  }
  double number(const char* name, double fallback) const {
    return parse(name, fallback, "a number", [](const char* s, char** end) { return std::strtod(s, end); });
  }
  long long integer(const char* name, long long fallback) const {
    return parse(name, fallback, "an integer",
                 [](const char* s, char** end) { return std::strtoll(s, end, 10); });
  }
  unsigned long long unsigned_integer(const char* name) const {
    LANTERN_CHECK(text(name).rfind('-', 0) != 0, "%s: row %zu: column %s is not an unsigned integer: '%s'",
                  file_.c_str(), row_, name, text(name).c_str());
    return parse(name, 0ull, "an unsigned integer",
                 [](const char* s, char** end) { return std::strtoull(s, end, 10); });
  }
  std::optional<double> optional(const char* name) const {
    if (text(name).empty()) return std::nullopt;
    return number(name, 0);
  }

 private:
  const std::map<std::string, size_t>& col_;
  const std::vector<std::string>& fields_;
  const std::string& file_;
  size_t row_;
  template <class T, class Parse>
  T parse(const char* name, T fallback, const char* what, Parse&& fn) const {
    const std::string s = text(name);
    if (s.empty()) return fallback;
    char* end = nullptr;
    T x = fn(s.c_str(), &end);
    LANTERN_CHECK(end && *end == '\0', "%s: row %zu: column %s is not %s: '%s'", file_.c_str(),
                  row_, name, what, s.c_str());
    return x;
  }
};

LaunchConfig read_launch(const RowReader& f) {
  LaunchConfig c;
  auto i32 = [&](const char* name) { return static_cast<int32_t>(f.integer(name, 0)); };
  c.grid_x = i32("grid_x");
  c.grid_y = i32("grid_y");
  c.grid_z = i32("grid_z");
  c.block_x = i32("block_x");
  c.block_y = i32("block_y");
  c.block_z = i32("block_z");
  c.regs_per_thread = static_cast<uint16_t>(f.unsigned_integer("regs_per_thread"));
  c.static_smem = i32("static_smem_bytes");
  c.dynamic_smem = i32("dynamic_smem_bytes");
  c.smem_config = static_cast<uint32_t>(f.unsigned_integer("smem_config_bytes"));
  return c;
}

std::optional<Occupancy> read_occupancy(const RowReader& f) {
  if (f.text("occupancy").empty()) return std::nullopt;
  Occupancy o;
  o.blocks_per_sm = static_cast<int>(f.integer("blocks_per_sm", 0));
  o.occupancy = f.number("occupancy", 0);
  o.waves = f.number("waves", 0);
  o.limit = f.text("occupancy_limit");
  return o;
}

KernelRow read_row(const RowReader& f) {
  KernelRow k;
  k.launch = f.integer("launch", -1);
  k.step = f.integer("step", -1);
  k.phase = f.text("phase");
  k.layer = static_cast<int>(f.integer("layer", -1));
  k.op = f.text("op");
  k.family = f.text("family");
  k.variant = static_cast<int>(f.integer("variant", -1));
  k.variant_name = f.text("variant_name");
  k.kernel = f.text("kernel");
  k.source = f.text("source");
  k.device = static_cast<int>(f.integer("device", 0));
  k.stream = static_cast<int>(f.integer("stream", 0));
  k.start_us = f.number("start_us", 0);
  k.dur_us = f.number("dur_us", 0);
  k.bytes = f.number("bytes", 0);
  k.flops = f.number("flops", 0);
  k.gb_per_s = f.optional("gb_per_s");
  k.tflop_per_s = f.optional("tflop_per_s");
  k.pct_roofline = f.optional("pct_roofline");
  k.graph_node = f.unsigned_integer("graph_node");
  k.correlation = static_cast<uint32_t>(f.unsigned_integer("correlation"));
  k.launch_config = read_launch(f);
  k.occupancy = read_occupancy(f);
  return k;
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
    write_row(line, r);
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
    rows.push_back(read_row(RowReader(col, f, file, r)));
  }
  return rows;
}

}  // namespace lantern::runfmt
