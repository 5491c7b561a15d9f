// Safetensors header reader, sharded-index reader, table matcher and layout
// writer. Only headers are read here; weights.cpp moves the tensor bytes.
#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"

namespace lantern {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The reference implementation refuses headers above 100 MB; so do we (a
// corrupt length would otherwise make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const fs::path& file) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    LANTERN_CHECK(r > 0, "%s: read of %zu bytes at offset %llu failed: %s", file.c_str(), n,
                  static_cast<unsigned long long>(offset),
                  r < 0 ? std::strerror(errno) : "end of file");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

uint64_t checked_u64(const json& v, const std::string& what) {
  LANTERN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                "%s must be a non-negative integer, got %s", what.c_str(), show(v).c_str());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& e, const fs::path& file) {
  const std::string where = file.string() + ": " + name;
  LANTERN_CHECK(e.is_object(), "%s: entry must be an object, got %s", where.c_str(),
                show(e).c_str());
  SafetensorsEntry out;
  out.name = name;
  out.file = file;

  auto dt = e.find("dtype");
  LANTERN_CHECK(dt != e.end(), "%s: entry has no dtype", where.c_str());
  LANTERN_CHECK(dt->is_string(), "%s: dtype must be a string, got %s", where.c_str(),
                show(*dt).c_str());
  out.dtype = dt->get<std::string>();
  size_t elem_bytes = 0;
  try {
    elem_bytes = safetensors_dtype_bytes(out.dtype);
  } catch (const Error& err) {
    LANTERN_FAIL("%s: %s", where.c_str(), err.what());
  }

  auto sh = e.find("shape");
  LANTERN_CHECK(sh != e.end(), "%s: entry has no shape", where.c_str());
  LANTERN_CHECK(sh->is_array(), "%s: shape must be a list, got %s", where.c_str(),
                show(*sh).c_str());
  // Element count with overflow checks: a hostile shape must not wrap around.
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t dim = checked_u64(d, where + ": shape dimension");
    LANTERN_CHECK(dim < (1ull << 40) && (dim == 0 || numel <= (1ull << 62) / dim),
                  "%s: shape %s is too large", where.c_str(), show(*sh).c_str());
    numel *= dim;
    out.shape.push_back(static_cast<int64_t>(dim));
  }

  auto off = e.find("data_offsets");
  LANTERN_CHECK(off != e.end(), "%s: entry has no data_offsets", where.c_str());
  LANTERN_CHECK(off->is_array() && off->size() == 2,
                "%s: data_offsets must be [begin, end], got %s", where.c_str(), show(*off).c_str());
  out.begin = checked_u64((*off)[0], where + ": data_offsets begin");
  out.end = checked_u64((*off)[1], where + ": data_offsets end");
  LANTERN_CHECK(out.begin <= out.end, "%s: data_offsets [%llu, %llu] end before they begin",
                where.c_str(), static_cast<unsigned long long>(out.begin),
                static_cast<unsigned long long>(out.end));
  LANTERN_CHECK(
      numel <= (1ull << 62) / elem_bytes && out.end - out.begin == numel * elem_bytes,
      "%s: data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu", where.c_str(),
      static_cast<unsigned long long>(out.begin), static_cast<unsigned long long>(out.end),
      static_cast<unsigned long long>(out.end - out.begin), shape_string(out.shape).c_str(),
      out.dtype.c_str(), static_cast<unsigned long long>(numel * elem_bytes));
  for (auto it = e.begin(); it != e.end(); ++it)
    LANTERN_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets",
                  "%s: unexpected field \"%s\" in entry", where.c_str(), it.key().c_str());
  return out;
}

// The tensors must tile the data area exactly, as the reference reader
// requires: a header length a byte or two short (the missing bytes are
// padding spaces, so the JSON still parses) would otherwise shift every
// tensor by that much and load silently wrong weights.
void check_exact_cover(const SafetensorsFile& f) {
  uint64_t expected = f.data_start;
  for (const auto& t : f.tensors) {
    LANTERN_CHECK(t.begin == expected,
                  "%s: tensor %s starts at data offset %llu but the previous tensor ends at %llu: "
                  "the data area must be covered exactly (header length %llu wrong, or a gap)",
                  f.path.c_str(), t.name.c_str(),
                  static_cast<unsigned long long>(t.begin - f.data_start),
                  static_cast<unsigned long long>(expected - f.data_start),
                  static_cast<unsigned long long>(f.header_bytes));
    expected = t.end;
  }
  LANTERN_CHECK(expected == f.file_bytes,
                "%s: %llu bytes after the last tensor (the tensors end at file byte %llu, the file "
                "has %llu): header length %llu wrong, or trailing garbage",
                f.path.c_str(), static_cast<unsigned long long>(f.file_bytes - expected),
                static_cast<unsigned long long>(expected),
                static_cast<unsigned long long>(f.file_bytes),
                static_cast<unsigned long long>(f.header_bytes));
}

}  // namespace

size_t safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  LANTERN_CHECK(it != sizes.end(), "unknown safetensors dtype \"%s\"", dtype.c_str());
  return it->second;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile parse_safetensors_header(const std::string& header_json, const fs::path& file,
                                         uint64_t file_bytes) {
  SafetensorsFile out;
  out.path = file;
  out.file_bytes = file_bytes;
  out.header_bytes = header_json.size();
  out.data_start = 8 + header_json.size();
  LANTERN_CHECK(out.data_start <= file_bytes,
                "%s: header length %llu runs past the end of the file (%llu bytes)", file.c_str(),
                static_cast<unsigned long long>(header_json.size()),
                static_cast<unsigned long long>(file_bytes));
  const uint64_t data_bytes = file_bytes - out.data_start;

  json h = parse_json_text(header_json, file.string() + ": header");
  LANTERN_CHECK(h.is_object(), "%s: header must be a JSON object, got %s", file.c_str(),
                show(h).c_str());

  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      LANTERN_CHECK(it->is_object(), "%s: __metadata__ must be an object of strings, got %s",
                    file.c_str(), show(*it).c_str());
      for (auto m = it->begin(); m != it->end(); ++m) {
        LANTERN_CHECK(m->is_string(), "%s: __metadata__.%s must be a string, got %s", file.c_str(),
                      m.key().c_str(), show(*m).c_str());
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e = parse_entry(it.key(), *it, file);
    LANTERN_CHECK(e.end <= data_bytes,
                  "%s: %s: data_offsets [%llu, %llu] run past the end of the data area (%llu "
                  "bytes): file truncated?",
                  file.c_str(), e.name.c_str(), static_cast<unsigned long long>(e.begin),
                  static_cast<unsigned long long>(e.end),
                  static_cast<unsigned long long>(data_bytes));
    e.begin += out.data_start;
    e.end += out.data_start;
    out.tensors.push_back(std::move(e));
  }

  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < out.tensors.size(); ++i) {
    const auto& a = out.tensors[i - 1];
    const auto& b = out.tensors[i];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (a.bytes() == 0 || b.bytes() == 0) continue;
    LANTERN_CHECK(b.begin >= a.end, "%s: tensors %s [%llu, %llu) and %s [%llu, %llu) overlap",
                  file.c_str(), a.name.c_str(),
                  static_cast<unsigned long long>(a.begin - out.data_start),
                  static_cast<unsigned long long>(a.end - out.data_start), b.name.c_str(),
                  static_cast<unsigned long long>(b.begin - out.data_start),
                  static_cast<unsigned long long>(b.end - out.data_start));
  }
  check_exact_cover(out);
  return out;
}

SafetensorsFile read_safetensors_header(const fs::path& file) {
  std::error_code ec;
  LANTERN_CHECK(fs::exists(file, ec), "%s does not exist", file.c_str());
  LANTERN_CHECK(fs::is_regular_file(file, ec), "%s is not a regular file", file.c_str());
  Fd fd;
  fd.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  LANTERN_CHECK(fd.fd >= 0, "cannot open %s: %s", file.c_str(), std::strerror(errno));
  struct stat st {};
  LANTERN_CHECK(::fstat(fd.fd, &st) == 0, "cannot stat %s: %s", file.c_str(), std::strerror(errno));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  LANTERN_CHECK(file_bytes >= 8,
                "%s: file is %llu bytes, too short for a safetensors header (truncated?)",
                file.c_str(), static_cast<unsigned long long>(file_bytes));
  unsigned char len_bytes[8];
  pread_exact(fd.fd, len_bytes, 8, 0, file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
  LANTERN_CHECK(n <= file_bytes - 8,
                "%s: header length %llu runs past the end of the file (%llu bytes): truncated or "
                "not a safetensors file?",
                file.c_str(), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(file_bytes));
  LANTERN_CHECK(n <= kMaxHeaderBytes, "%s: header length %llu exceeds the %llu-byte limit",
                file.c_str(), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(kMaxHeaderBytes));
  std::string header(n, '\0');
  pread_exact(fd.fd, header.data(), n, 8, file);
  LANTERN_CHECK(n > 0 && header[0] == '{',
                "%s: header does not start with '{': not a safetensors file?", file.c_str());
  return parse_safetensors_header(header, file, file_bytes);
}

const SafetensorsEntry* SafetensorsModel::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return &files[it->second.first].tensors[it->second.second];
}

std::vector<const SafetensorsEntry*> SafetensorsModel::all() const {
  std::vector<const SafetensorsEntry*> out;
  for (const auto& f : files)
    for (const auto& t : f.tensors) out.push_back(&t);
  return out;
}

SafetensorsModel open_safetensors_model(const fs::path& model_dir) {
  std::error_code ec;
  LANTERN_CHECK(fs::exists(model_dir, ec), "model directory %s does not exist", model_dir.c_str());
  LANTERN_CHECK(fs::is_directory(model_dir, ec),
                "model path %s is a file, expected a directory holding config.json and "
                "model.safetensors",
                model_dir.c_str());
  SafetensorsModel model;
  const fs::path index = model_dir / "model.safetensors.index.json";
  const fs::path single = model_dir / "model.safetensors";

  // name -> shard file named by the index (sharded only)
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index, ec)) {
    model.index = index;
    json j = parse_json_file(index);
    LANTERN_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                  "%s: expected an object with a \"weight_map\" object", index.c_str());
    std::vector<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      LANTERN_CHECK(it->is_string(), "%s: weight_map.%s must be a file name, got %s", index.c_str(),
                    it.key().c_str(), show(*it).c_str());
      std::string shard = it->get<std::string>();
      // Shards live beside the index: no paths, so an index cannot point elsewhere.
      LANTERN_CHECK(
          !shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
          "%s: weight_map.%s names \"%s\", expected a file name in the same directory",
          index.c_str(), it.key().c_str(), shard.c_str());
      weight_map[it.key()] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    LANTERN_CHECK(!shards.empty(), "%s: weight_map is empty", index.c_str());
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) {
      LANTERN_CHECK(fs::exists(model_dir / s, ec), "%s (named in %s) does not exist",
                    (model_dir / s).c_str(), index.c_str());
      model.files.push_back(read_safetensors_header(model_dir / s));
    }
  } else {
    LANTERN_CHECK(fs::exists(single, ec),
                  "%s holds neither model.safetensors nor model.safetensors.index.json",
                  model_dir.c_str());
    model.files.push_back(read_safetensors_header(single));
  }

  for (size_t f = 0; f < model.files.size(); ++f) {
    const auto& file = model.files[f];
    for (size_t t = 0; t < file.tensors.size(); ++t) {
      const auto& name = file.tensors[t].name;
      auto [it, inserted] = model.by_name_.emplace(name, std::make_pair(f, t));
      LANTERN_CHECK(inserted, "tensor %s appears in both %s and %s", name.c_str(),
                    model.files[it->second.first].path.c_str(), file.path.c_str());
      if (!weight_map.empty()) {
        auto w = weight_map.find(name);
        LANTERN_CHECK(w == weight_map.end() || w->second == file.path.filename().string(),
                      "%s maps %s to %s, but it is stored in %s", index.c_str(), name.c_str(),
                      w->second.c_str(), file.path.c_str());
      }
    }
  }
  for (const auto& [name, shard] : weight_map)
    LANTERN_CHECK(model.by_name_.count(name), "%s maps %s to %s, which does not contain it",
                  index.c_str(), name.c_str(), shard.c_str());
  return model;
}

std::vector<SafetensorsEntry> match_tensor_table(const SafetensorsModel& model,
                                                 const std::vector<TensorSpec>& specs,
                                                 std::vector<std::string>* extra) {
  const std::string where =
      model.index.empty()
          ? (model.files.empty() ? std::string("model") : model.files[0].path.string())
          : model.index.string();
  std::vector<std::string> missing;
  std::vector<SafetensorsEntry> out;
  out.reserve(specs.size());
  for (const auto& spec : specs) {
    const SafetensorsEntry* e = model.find(spec.name);
    if (!e) {
      missing.push_back(spec.name);
      continue;
    }
    LANTERN_CHECK(e->shape == spec.shape && e->dtype == spec.dtype,
                  "%s: %s: expected %s %s, found %s %s", e->file.c_str(), spec.name.c_str(),
                  shape_string(spec.shape).c_str(), spec.dtype.c_str(),
                  shape_string(e->shape).c_str(), e->dtype.c_str());
    out.push_back(*e);
  }
  if (!missing.empty()) {
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) names += (i ? ", " : "") + missing[i];
    if (missing.size() > 5) names += strformat(", ... (%zu more)", missing.size() - 5);
    LANTERN_FAIL("%s: missing %zu tensor%s the config needs: %s", where.c_str(), missing.size(),
                 missing.size() == 1 ? "" : "s", names.c_str());
  }
  if (extra) {
    extra->clear();
    std::unordered_map<std::string, int> wanted;
    for (const auto& s : specs) wanted[s.name] = 1;
    for (const auto* e : model.all())
      if (!wanted.count(e->name)) extra->push_back(e->name);
    std::sort(extra->begin(), extra->end());
  }
  return out;
}

SafetensorsLayout safetensors_layout(const std::vector<TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout out;
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    LANTERN_ASSERT(!h.contains(t.name), "duplicate tensor %s", t.name.c_str());
    uint64_t bytes = t.bytes();
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    out.offsets.push_back(offset);
    offset += bytes;
  }
  out.data_bytes = offset;
  std::string text = h.dump();
  // Pad with spaces so the data area starts 8-byte aligned, as HF's writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  out.prefix.resize(8);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.prefix += text;
  return out;
}

}  // namespace lantern
