#include "engine/tokenizer/added_tokens.h"

#include <cstring>

namespace lantern::tok {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, n] : nodes_[node].next)
    if (b == byte) return n;
  return -1;
}

void AddedTokenMatcher::add(std::string_view content, int32_t id) {
  if (content.empty()) return;  // an empty token can never be matched (HF skips it too)
  int32_t node = 0;
  for (char c : content) {
    const uint8_t b = static_cast<uint8_t>(c);
    int32_t n = child(node, b);
    if (n < 0) {
      n = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(b, n);
      nodes_.emplace_back();
    }
    node = n;
  }
  nodes_[node].id = id;
  const uint8_t first = static_cast<uint8_t>(content[0]);
  if (!first_byte_[first]) ++distinct_first_, only_first_ = first;
  first_byte_[first] = true;
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t from) const {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = from; i < n; ++i) {
    if (distinct_first_ == 1) {  // Llama 3: every special starts with '<' — memchr skips ahead
      const void* hit = std::memchr(p + i, only_first_, n - i);
      if (!hit) break;
      i = static_cast<const uint8_t*>(hit) - p;
    } else if (!first_byte_[p[i]]) {
      continue;
    }
    Match best;
    int32_t node = 0;
    for (size_t j = i; j < n && (node = child(node, p[j])) >= 0; ++j)
      if (nodes_[node].id >= 0) best = Match{i, j + 1 - i, nodes_[node].id};
    if (best.found()) return best;
  }
  return Match{};
}

}  // namespace lantern::tok
