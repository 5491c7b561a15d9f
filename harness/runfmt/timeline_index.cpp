#include "harness/runfmt/timeline_index.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_map>

#include "kernels/base/errors.h"

namespace lantern::runfmt {

namespace {

constexpr char kMagic[8] = {'L', 'A', 'N', 'T', 'I', 'D', 'X', '\0'};
constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();

// Interns strings (names repeat a million times; args dumps are appended as is).
class StringPool {
 public:
  explicit StringPool(std::vector<std::string>& out) : out_(out) {}
  int64_t intern(const std::string& s) {
    auto [it, inserted] = ids_.try_emplace(s, static_cast<int64_t>(out_.size()));
    if (inserted) out_.push_back(s);
    return it->second;
  }
  int64_t append(std::string s) {
    out_.push_back(std::move(s));
    return static_cast<int64_t>(out_.size()) - 1;
  }

 private:
  std::vector<std::string>& out_;
  std::unordered_map<std::string, int64_t> ids_;
};

// A table under construction: columns by name, appended row by row.
class TableBuilder {
 public:
  TableBuilder(std::string name, std::vector<std::pair<std::string, IndexColumn::Type>> columns) {
    table_.name = std::move(name);
    for (auto& [n, t] : columns) {
      IndexColumn c;
      c.name = n;
      c.type = t;
      table_.columns.push_back(std::move(c));
    }
  }
  IndexColumn& col(size_t i) { return table_.columns[i]; }
  void f(size_t i, double v) { table_.columns[i].f.push_back(v); }
  void i(size_t c, int64_t v) { table_.columns[c].i.push_back(v); }
  void reserve(size_t n) {
    for (auto& c : table_.columns) (c.type == IndexColumn::f64) ? c.f.reserve(n) : c.i.reserve(n);
  }
  IndexTable finish() {
    table_.rows = table_.columns.empty() ? 0 : table_.columns[0].size();
    for (const auto& c : table_.columns)
      LANTERN_ASSERT(c.size() == table_.rows, "index column %s has %zu rows, expected %zu",
                     c.name.c_str(), c.size(), table_.rows);
    return std::move(table_);
  }

 private:
  IndexTable table_;
};

using T = IndexColumn::Type;

IndexTable kernels_table(const std::vector<KernelRow>& rows, StringPool& pool) {
  TableBuilder b("kernels", {{"launch", T::i64},       {"step", T::i64},        {"phase", T::str},
                             {"layer", T::i64},        {"op", T::str},          {"family", T::str},
                             {"variant", T::i64},      {"variant_name", T::str}, {"kernel", T::str},
                             {"source", T::str},       {"device", T::i64},      {"stream", T::i64},
                             {"start_us", T::f64},     {"dur_us", T::f64},      {"bytes", T::f64},
                             {"flops", T::f64},        {"gb_per_s", T::f64},    {"tflop_per_s", T::f64},
                             {"pct_roofline", T::f64}, {"graph_node", T::i64},  {"correlation", T::i64},
                             // run format 1.1: launch configuration and occupancy (kernels.csv's names)
                             {"grid_x", T::i64}, {"grid_y", T::i64}, {"grid_z", T::i64},
                             {"block_x", T::i64}, {"block_y", T::i64}, {"block_z", T::i64},
                             {"regs_per_thread", T::i64}, {"static_smem_bytes", T::i64},
                             {"dynamic_smem_bytes", T::i64}, {"blocks_per_sm", T::i64},
                             {"occupancy", T::f64}, {"waves", T::f64}, {"occupancy_limit", T::str}});
  b.reserve(rows.size());
  for (const KernelRow& r : rows) {
    b.i(0, r.launch);
    b.i(1, r.step);
    b.i(2, pool.intern(r.phase));
    b.i(3, r.layer);
    b.i(4, pool.intern(r.op));
    b.i(5, pool.intern(r.family));
    b.i(6, r.variant);
    b.i(7, pool.intern(r.variant_name));
    b.i(8, pool.intern(r.kernel));
    b.i(9, pool.intern(r.source));
    b.i(10, r.device);
    b.i(11, r.stream);
    b.f(12, r.start_us);
    b.f(13, r.dur_us);
    b.f(14, r.bytes);
    b.f(15, r.flops);
    b.f(16, r.gb_per_s.value_or(kAbsent));
    b.f(17, r.tflop_per_s.value_or(kAbsent));
    b.f(18, r.pct_roofline.value_or(kAbsent));
    b.i(19, static_cast<int64_t>(r.graph_node));
    b.i(20, r.correlation);
    const LaunchConfig& lc = r.launch_config;
    const bool known = lc.known();  // -1 / NaN: not recorded (host rows, 1.0 runs)
    int c = 21;
    for (int32_t v : {lc.grid_x, lc.grid_y, lc.grid_z, lc.block_x, lc.block_y, lc.block_z,
                      int32_t{lc.regs_per_thread}, lc.static_smem, lc.dynamic_smem})
      b.i(c++, known ? v : -1);
    b.i(30, r.occupancy ? r.occupancy->blocks_per_sm : -1);
    b.f(31, r.occupancy ? r.occupancy->occupancy : kAbsent);
    b.f(32, r.occupancy ? r.occupancy->waves : kAbsent);
    b.i(33, r.occupancy ? pool.intern(r.occupancy->limit) : -1);
  }
  return b.finish();
}

int64_t arg_int(const nlohmann::json& args, const char* key) {
  if (!args.is_object()) return -1;
  auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<int64_t>() : -1;
}

std::string args_text(const nlohmann::json& args) {
  return args.is_null() ? std::string()
                        : args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

IndexTable ranges_table(const std::vector<TraceEvent>& events, StringPool& pool) {
  TableBuilder b("ranges", {{"pid", T::i64},  {"tid", T::i64},   {"ts_us", T::f64},
                            {"dur_us", T::f64}, {"name", T::str}, {"cat", T::str},
                            {"step", T::i64}, {"layer", T::i64}, {"args", T::str}});
  for (const TraceEvent& e : events) {
    if (e.ph != 'X' || (e.pid == track::kGpuPid && e.cat == "kernel")) continue;
    b.i(0, e.pid);
    b.i(1, e.tid);
    b.f(2, e.ts_us);
    b.f(3, e.dur_us);
    b.i(4, pool.intern(e.name));
    b.i(5, pool.intern(e.cat));
    b.i(6, arg_int(e.args, "step"));
    b.i(7, arg_int(e.args, "layer"));
    b.i(8, e.args.is_null() ? -1 : pool.append(args_text(e.args)));
  }
  return b.finish();
}

IndexTable counters_table(const std::vector<TraceEvent>& events, StringPool& pool) {
  TableBuilder b("counters", {{"ts_us", T::f64}, {"name", T::str}, {"key", T::str}, {"value", T::f64}});
  for (const TraceEvent& e : events) {
    if (e.ph != 'C' || !e.args.is_object()) continue;
    for (const auto& [key, value] : e.args.items()) {
      if (!value.is_number()) continue;
      b.f(0, e.ts_us);
      b.i(1, pool.intern(e.name));
      b.i(2, pool.intern(key));
      b.f(3, value.get<double>());
    }
  }
  return b.finish();
}

IndexTable marks_table(const std::vector<TraceEvent>& events, StringPool& pool) {
  TableBuilder b("marks", {{"pid", T::i64}, {"tid", T::i64}, {"ts_us", T::f64}, {"name", T::str},
                           {"cat", T::str}, {"args", T::str}});
  for (const TraceEvent& e : events) {
    if (e.ph != 'i' && e.ph != 'I') continue;
    b.i(0, e.pid);
    b.i(1, e.tid);
    b.f(2, e.ts_us);
    b.i(3, pool.intern(e.name));
    b.i(4, pool.intern(e.cat));
    b.i(5, e.args.is_null() ? -1 : pool.append(args_text(e.args)));
  }
  return b.finish();
}

IndexTable tracks_table(const std::vector<TraceEvent>& events, StringPool& pool) {
  TableBuilder b("tracks", {{"pid", T::i64}, {"tid", T::i64}, {"kind", T::str}, {"name", T::str}});
  for (const TraceEvent& e : events) {
    if (e.ph != 'M' || !e.args.is_object() || !e.args.contains("name") ||
        !e.args["name"].is_string())
      continue;
    b.i(0, e.pid);
    b.i(1, e.tid);
    b.i(2, pool.intern(e.name));
    b.i(3, pool.intern(e.args["name"].get<std::string>()));
  }
  return b.finish();
}

// ---------------------------------------------------------------- file I/O

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

class Writer {
 public:
  explicit Writer(const std::filesystem::path& path) : path_(path) {
    file_.reset(std::fopen(path.c_str(), "wb"));
    LANTERN_CHECK(file_, "cannot write %s (%s)", path.c_str(), std::strerror(errno));
  }
  void bytes(const void* p, size_t n) {
    if (n) LANTERN_CHECK(std::fwrite(p, 1, n, file_.get()) == n, "writing %s failed (%s)",
                         path_.c_str(), std::strerror(errno));
    offset_ += n;
  }
  void u64(uint64_t v) { bytes(&v, 8); }
  void text(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
    pad();
  }
  void pad() {
    static const char zeros[8] = {};
    bytes(zeros, (8 - offset_ % 8) % 8);
  }
  void close() {
    LANTERN_CHECK(std::fclose(file_.release()) == 0, "writing %s failed (%s)", path_.c_str(),
                  std::strerror(errno));
  }

 private:
  std::filesystem::path path_;
  File file_;
  size_t offset_ = 0;
};

// Reads from a whole-file buffer; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(std::vector<char> data) : data_(std::move(data)) {}
  const char* take(size_t n, const char* what) {
    LANTERN_CHECK(n <= data_.size() - pos_, "timeline.bin: truncated file (reading %s at byte %zu)",
                  what, pos_);
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t u64(const char* what) {
    uint64_t v;
    std::memcpy(&v, take(8, what), 8);
    return v;
  }
  std::string text(const char* what) {
    uint64_t n = u64(what);
    LANTERN_CHECK(n <= data_.size() - pos_, "timeline.bin: truncated file (a %s of %llu bytes)",
                  what, static_cast<unsigned long long>(n));
    std::string s(take(n, what), n);
    pad();
    return s;
  }
  void pad() { pos_ = std::min(data_.size(), pos_ + (8 - pos_ % 8) % 8); }

 private:
  std::vector<char> data_;
  size_t pos_ = 0;
};

std::vector<char> read_all(const std::filesystem::path& path) {
  File f(std::fopen(path.c_str(), "rb"));
  LANTERN_CHECK(f, "timeline.bin: cannot open %s (%s)", path.c_str(), std::strerror(errno));
  std::fseek(f.get(), 0, SEEK_END);
  long size = std::ftell(f.get());
  std::fseek(f.get(), 0, SEEK_SET);
  LANTERN_CHECK(size >= 0, "timeline.bin: cannot size %s", path.c_str());
  std::vector<char> data(static_cast<size_t>(size));
  LANTERN_CHECK(std::fread(data.data(), 1, data.size(), f.get()) == data.size(),
                "timeline.bin: short read of %s", path.c_str());
  return data;
}

}  // namespace

const IndexColumn* IndexTable::find(const std::string& column) const {
  for (const IndexColumn& c : columns)
    if (c.name == column) return &c;
  return nullptr;
}

const IndexTable* TimelineIndex::find(const std::string& table) const {
  for (const IndexTable& t : tables)
    if (t.name == table) return &t;
  return nullptr;
}

TimelineIndex build_timeline_index(const std::vector<TraceEvent>& events,
                                   const std::vector<KernelRow>& kernels) {
  TimelineIndex index;
  StringPool pool(index.strings);
  pool.intern("");  // id 0: the empty string
  index.tables.push_back(kernels_table(kernels, pool));
  index.tables.push_back(ranges_table(events, pool));
  index.tables.push_back(counters_table(events, pool));
  index.tables.push_back(marks_table(events, pool));
  index.tables.push_back(tracks_table(events, pool));
  return index;
}

// Header: magic (8), major u32, minor u32, string count u64, then each string
// (u64 length, bytes, zero padding to 8), table count u64, then per table:
// name, rows u64, column count u64, per column: name, type u64, rows x 8 bytes.
void write_timeline_index(const std::filesystem::path& path, const TimelineIndex& index) {
  Writer w(path);
  w.bytes(kMagic, 8);
  uint32_t version[2] = {static_cast<uint32_t>(index.major), static_cast<uint32_t>(index.minor)};
  w.bytes(version, 8);
  w.u64(index.strings.size());
  for (const std::string& s : index.strings) w.text(s);
  w.u64(index.tables.size());
  for (const IndexTable& t : index.tables) {
    w.text(t.name);
    w.u64(t.rows);
    w.u64(t.columns.size());
    for (const IndexColumn& c : t.columns) {
      w.text(c.name);
      w.u64(c.type);
      if (c.type == IndexColumn::f64)
        w.bytes(c.f.data(), c.f.size() * 8);
      else
        w.bytes(c.i.data(), c.i.size() * 8);
    }
  }
  w.close();
}

TimelineIndex read_timeline_index(const std::filesystem::path& path) {
  Reader r(read_all(path));
  LANTERN_CHECK(std::memcmp(r.take(8, "magic"), kMagic, 8) == 0,
                "timeline.bin: not a Lantern timeline index (bad magic)");
  uint32_t version[2];
  std::memcpy(version, r.take(8, "version"), 8);
  TimelineIndex index;
  index.major = static_cast<int>(version[0]);
  index.minor = static_cast<int>(version[1]);
  LANTERN_CHECK(index.major <= kTimelineIndexMajor,
                "timeline.bin: index version %d.%d is newer than this lantern reads (%d.x): use a "
                "newer lantern",
                index.major, index.minor, kTimelineIndexMajor);
  uint64_t strings = r.u64("string count");
  LANTERN_CHECK(strings < (1ull << 32), "timeline.bin: corrupt string count %llu",
                static_cast<unsigned long long>(strings));
  index.strings.reserve(strings);
  for (uint64_t s = 0; s < strings; ++s) index.strings.push_back(r.text("string"));
  uint64_t tables = r.u64("table count");
  LANTERN_CHECK(tables < 1024, "timeline.bin: corrupt table count %llu",
                static_cast<unsigned long long>(tables));
  for (uint64_t t = 0; t < tables; ++t) {
    IndexTable table;
    table.name = r.text("table name");
    table.rows = r.u64("row count");
    uint64_t columns = r.u64("column count");
    LANTERN_CHECK(columns < 4096, "timeline.bin: table %s: corrupt column count", table.name.c_str());
    for (uint64_t c = 0; c < columns; ++c) {
      IndexColumn col;
      col.name = r.text("column name");
      uint64_t type = r.u64("column type");
      LANTERN_CHECK(type <= IndexColumn::str, "timeline.bin: column %s.%s has unknown type %llu",
                    table.name.c_str(), col.name.c_str(), static_cast<unsigned long long>(type));
      col.type = static_cast<IndexColumn::Type>(type);
      LANTERN_CHECK(table.rows < (1ull << 40), "timeline.bin: corrupt row count");
      const char* p = r.take(table.rows * 8, "column data");
      if (col.type == IndexColumn::f64) {
        col.f.resize(table.rows);
        if (table.rows) std::memcpy(col.f.data(), p, table.rows * 8);  // empty tables: data() may be null
      } else {
        col.i.resize(table.rows);
        if (table.rows) std::memcpy(col.i.data(), p, table.rows * 8);
        if (col.type == IndexColumn::str)
          for (int64_t id : col.i)
            LANTERN_CHECK(id >= -1 && id < static_cast<int64_t>(strings),
                          "timeline.bin: column %s.%s: string id %lld out of range",
                          table.name.c_str(), col.name.c_str(), static_cast<long long>(id));
      }
      table.columns.push_back(std::move(col));
    }
    index.tables.push_back(std::move(table));
  }
  return index;
}

}  // namespace lantern::runfmt
