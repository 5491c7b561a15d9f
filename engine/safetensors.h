#pragma once
// Safetensors: read and validate the header of one file or of a sharded set
// (model.safetensors.index.json), match it against the tensor table the
// config implies, and lay out new files (lantern synth).
//
// File format: u64 little-endian N, then N bytes of JSON
//   {"__metadata__": {"format": "pt"},
//    "<name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
// then the data area; offsets are relative to its start (byte 8 + N).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/weights.h"

namespace lantern {

// One tensor as a file's header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors dtype string: "BF16", "F32", ...
  std::vector<int64_t> shape;
  std::filesystem::path file;  // the file holding the bytes
  uint64_t begin = 0;          // absolute offset in `file` of the first byte
  uint64_t end = 0;            // absolute offset one past the last byte
  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsFile {
  std::filesystem::path path;
  uint64_t file_bytes = 0;
  uint64_t header_bytes = 0;                    // N, the JSON length (padding included)
  uint64_t data_start = 0;                      // 8 + N
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<SafetensorsEntry> tensors;        // sorted by offset
};

// Bytes per element of a safetensors dtype; throws naming the dtype when unknown.
size_t safetensors_dtype_bytes(const std::string& dtype);

// Reads and validates one file's header: length against the file size, the
// JSON, each entry's dtype/shape/offsets, offsets inside the data area and
// non-overlapping. Every error names the file (and the tensor).
SafetensorsFile read_safetensors_header(const std::filesystem::path& file);

// The same checks on a header already in memory (`file` names it in errors).
SafetensorsFile parse_safetensors_header(const std::string& header_json,
                                         const std::filesystem::path& file, uint64_t file_bytes);

// All tensors of a model directory: model.safetensors.index.json (sharded)
// when present, else model.safetensors.
struct SafetensorsModel {
  std::filesystem::path index;  // empty for a single file
  std::vector<SafetensorsFile> files;
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  size_t tensor_count() const { return by_name_.size(); }
  std::vector<const SafetensorsEntry*> all() const;  // every tensor, file by file, by offset

 private:
  std::unordered_map<std::string, std::pair<size_t, size_t>> by_name_;  // -> (file, tensor)
  friend SafetensorsModel open_safetensors_model(const std::filesystem::path& model_dir);
};
SafetensorsModel open_safetensors_model(const std::filesystem::path& model_dir);

// Checks the files against the table the config implies: every spec present
// with its dtype and shape ("<file>: <name>: expected [8192, 2048] BF16, found
// [8192, 1024] BF16"); throws on the first mismatch or listing the missing
// tensors. Returns the entries in spec order; tensors nobody asked for are
// listed in *extra (sorted), when given.
std::vector<SafetensorsEntry> match_tensor_table(const SafetensorsModel& model,
                                                 const std::vector<TensorSpec>& specs,
                                                 std::vector<std::string>* extra = nullptr);

// "[8192, 2048]"
std::string shape_string(const std::vector<int64_t>& shape);

// Layout of a new file holding `tensors` back to back in the given order.
struct SafetensorsLayout {
  std::string prefix;             // u64 length + JSON header padded with spaces to 8 bytes
  std::vector<uint64_t> offsets;  // data-area offset of each tensor, in input order
  uint64_t data_bytes = 0;
  uint64_t file_bytes() const { return prefix.size() + data_bytes; }
};
SafetensorsLayout safetensors_layout(const std::vector<TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata = {
                                         {"format", "pt"}});

}  // namespace lantern
