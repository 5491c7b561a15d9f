#pragma once
// Byte-level BPE on token ids: a pre-tokenized piece starts as one token per
// byte and adjacent pairs are merged, lowest merge rank first (leftmost pair
// on ties), until no ranked pair is left — the rule HF's tokenizers and the
// JS port both implement. Working on ids instead of strings makes a merge
// one hash probe on (left id, right id).
#include <array>
#include <climits>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/flat_map.h"

namespace lantern::tok {

class BpeModel {
 public:
  // Registers vocab entry `id` whose raw bytes are `bytes`.
  void add_token(std::string_view bytes, int32_t id);
  // Registers merge number `rank`: (left, right) -> merged. Call reserve_merges first.
  void reserve_merges(size_t n) { merges_.reserve(n); }
  void add_merge(int32_t left, int32_t right, int32_t merged, int32_t rank);
  void set_ignore_merges(bool v) { ignore_merges_ = v; }

  // Id of the vocab entry with exactly these raw bytes, or -1.
  int32_t find(std::string_view bytes) const {
    const int32_t* id = ids_.find(bytes);
    return id ? *id : -1;
  }
  // Missing single-byte tokens make some inputs unencodable: report the first one, or -1.
  int missing_byte() const;

  // Appends the ids of one piece (raw bytes, non-empty).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank, merged;
  };
  void merge_small(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_large(std::string_view piece, std::vector<int32_t>& out) const;
  const Merge* merge_of(int32_t a, int32_t b) const { return merges_.find(a, b); }

  FlatStringMap<int32_t> ids_{1024};  // grows: a small tokenizer.json loads in microseconds
  FlatPairMap<Merge> merges_;
  // Merges of two single-byte tokens, indexed by the two bytes: every piece
  // starts with these lookups, and a dense 512 KB table keeps them in cache.
  std::vector<Merge> byte_pairs_ = std::vector<Merge>(256 * 256, Merge{INT32_MAX, -1});
  std::vector<int16_t> byte_of_id_;  // id -> its byte for single-byte tokens, else -1
  std::array<int32_t, 256> byte_ids_ = [] {
    std::array<int32_t, 256> a{};
    a.fill(-1);
    return a;
  }();
  bool ignore_merges_ = false;
};

}  // namespace lantern::tok
