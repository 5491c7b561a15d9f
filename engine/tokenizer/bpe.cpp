#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <climits>

#include "kernels/base/errors.h"

namespace lantern::tok {
namespace {

// Pieces up to this many bytes merge with a quadratic scan over a flat array
// (no heap, no links): almost every word is this short. Longer pieces (CJK
// runs, long identifiers, 1,000-letter words) use the O(n log n) heap.
constexpr size_t kSmallPiece = 24;

struct HeapEntry {
  int32_t rank, pos;          // pos: start byte of the left symbol (orders ties left-first)
  int32_t left_id, right_id;  // to recognise entries made stale by later merges
  bool operator>(const HeapEntry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct LargeScratch {
  std::vector<int32_t> id, next, prev;
  std::vector<HeapEntry> heap;
};

}  // namespace

void BpeModel::add_token(std::string_view bytes, int32_t id) {
  ids_.insert(bytes, id);
  if (bytes.size() != 1) return;
  byte_ids_[static_cast<uint8_t>(bytes[0])] = id;
  if (byte_of_id_.size() <= static_cast<size_t>(id)) byte_of_id_.resize(id + 1, -1);
  byte_of_id_[id] = static_cast<uint8_t>(bytes[0]);
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  merges_.put(left, right, Merge{rank, merged});
  // Byte tokens are registered before merges (the loader adds the vocab first).
  auto byte_of = [&](int32_t id) {
    return id < static_cast<int32_t>(byte_of_id_.size()) ? byte_of_id_[id] : -1;
  };
  if (byte_of(left) >= 0 && byte_of(right) >= 0)
    byte_pairs_[byte_of(left) * 256 + byte_of(right)] = Merge{rank, merged};
}

int BpeModel::missing_byte() const {
  for (int b = 0; b < 256; ++b)
    if (byte_ids_[b] < 0) return b;
  return -1;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    // HF's ignore_merges: a piece that is itself a vocab entry is that entry,
    // even where the merges would have split it differently.
    if (const int32_t* id = ids_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() <= kSmallPiece)
    merge_small(piece, out);
  else
    merge_large(piece, out);
}

void BpeModel::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t ids[kSmallPiece], ranks[kSmallPiece], merged[kSmallPiece];
  size_t n = piece.size();
  auto rank_at = [&](size_t i) {
    const Merge* m = merge_of(ids[i], ids[i + 1]);
    ranks[i] = m ? m->rank : INT_MAX;
    merged[i] = m ? m->merged : -1;
  };
  const auto* bytes = reinterpret_cast<const uint8_t*>(piece.data());
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids_[bytes[i]];
  for (size_t i = 0; i + 1 < n; ++i) {
    const Merge& m = byte_pairs_[bytes[i] * 256 + bytes[i + 1]];
    ranks[i] = m.rank, merged[i] = m.merged;
  }
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;  // strict: the leftmost of equal ranks wins
    if (ranks[best] == INT_MAX) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) rank_at(best - 1);
    if (best + 1 < n) rank_at(best);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeModel::merge_large(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local LargeScratch s;
  const int32_t n = static_cast<int32_t>(piece.size());
  s.id.resize(n), s.next.resize(n), s.prev.resize(n);
  s.heap.clear();
  auto push = [&](int32_t pos) {
    const int32_t r = s.next[pos];
    if (r < 0) return;
    if (const Merge* m = merge_of(s.id[pos], s.id[r])) {
      s.heap.push_back({m->rank, pos, s.id[pos], s.id[r]});
      std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    s.id[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
    s.next[i] = i + 1 < n ? i + 1 : -1;
    s.prev[i] = i - 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    const HeapEntry e = s.heap.back();
    s.heap.pop_back();
    const int32_t r = s.next[e.pos];
    // A dead left symbol has id -1, so it fails the id check too.
    if (r < 0 || s.id[e.pos] != e.left_id || s.id[r] != e.right_id) continue;
    s.id[e.pos] = merge_of(e.left_id, e.right_id)->merged;
    s.id[r] = -1;
    s.next[e.pos] = s.next[r];
    if (s.next[r] >= 0) s.prev[s.next[r]] = e.pos;
    if (s.prev[e.pos] >= 0) push(s.prev[e.pos]);
    push(e.pos);
  }
  for (int32_t i = 0; i >= 0; i = s.next[i]) out.push_back(s.id[i]);
}

}  // namespace lantern::tok
