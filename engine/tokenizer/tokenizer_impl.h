#pragma once
// Tokenizer internals shared by the loader (tokenizer_load.cpp) and the
// encode/decode paths (tokenizer.cpp). Not part of the public API.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/flat_map.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace lantern {

enum TokenFlag : uint8_t {
  kAssigned = 1,  // some vocab or added entry has this id (ids may have holes)
  kAdded = 2,     // an added token: matched in raw text, decoded verbatim
  kSpecial = 4,
  kLstrip = 8,   // added token swallows whitespace on its left
  kRstrip = 16,  // ... and on its right
};

struct Tokenizer::Impl {
  uint64_t instance_id = 0;  // keys the per-thread piece cache
  std::string source;        // tokenizer.json path, for messages

  std::vector<std::string> token_text;  // id -> tokenizer.json spelling
  std::string bytes_arena;              // id -> raw bytes: [bytes_off[id], bytes_off[id + 1])
  std::vector<uint32_t> bytes_off;
  std::vector<uint8_t> flags;                      // id -> TokenFlag bits
  tok::FlatStringMap<int32_t> token_ids{1024};  // spelling -> id (grows; small files load fast)

  tok::BpeModel bpe;
  std::vector<tok::RegexSplitter> splitters;  // applied in order; empty = no split
  tok::AddedTokenMatcher all_added;           // added tokens, specials included
  tok::AddedTokenMatcher plain_added;         // non-special added tokens only

  std::vector<int32_t> post_prefix, post_suffix;  // post_processor template around $A

  std::optional<int32_t> bos, eos;
  std::string bos_token;
  std::vector<int32_t> stop;
  std::optional<ChatTemplateInfo> chat;

  std::string_view bytes_of(int32_t id) const {
    return std::string_view(bytes_arena).substr(bytes_off[id], bytes_off[id + 1] - bytes_off[id]);
  }
};

// Fills everything but instance_id from the two JSON files (tokenizer_load.cpp).
void load_tokenizer_files(const std::filesystem::path& json_path,
                          const std::filesystem::path& config_path, Tokenizer::Impl& impl);

}  // namespace lantern
