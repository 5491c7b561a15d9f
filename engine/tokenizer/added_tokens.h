#pragma once
// Finds added tokens (specials like <|eot_id|>) in raw text before any
// pre-tokenization, leftmost-longest like HF's Aho-Corasick matcher and the
// JS port's trie: at the first position where some token starts, the longest
// one starting there wins.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lantern::tok {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t pos = std::string_view::npos, len = 0;
    int32_t id = -1;
    bool found() const { return pos != std::string_view::npos; }
  };

  void add(std::string_view content, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  Match find(std::string_view text, size_t from) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // few children: a linear scan is fastest
    int32_t id = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_byte_{};
  int distinct_first_ = 0;
  uint8_t only_first_ = 0;
};

}  // namespace lantern::tok
