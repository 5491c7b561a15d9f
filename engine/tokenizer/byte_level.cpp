#include "engine/tokenizer/byte_level.h"

#include "engine/tokenizer/utf8.h"

namespace lantern::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> char_of{};
  std::array<int16_t, 512> byte_of{};  // every mapped code point is < 256 + 68
};

Tables build() {
  Tables t;
  t.byte_of.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    t.char_of[b] = printable ? b : next_extra++;
    t.byte_of[t.char_of[b]] = static_cast<int16_t>(b);
  }
  return t;
}

const Tables& tables() {
  static const Tables t = build();
  return t;
}

}  // namespace

uint32_t char_of_byte(uint8_t b) {
  return tables().char_of[b];
}

std::optional<uint8_t> byte_of_char(uint32_t cp) {
  if (cp >= tables().byte_of.size() || tables().byte_of[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().byte_of[cp]);
}

std::optional<std::string> decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  while (!token.empty()) {
    utf8::Step st = utf8::next(token);
    if (!st.valid) return std::nullopt;
    auto b = byte_of_char(st.cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    token.remove_prefix(st.len);
  }
  return out;
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::append_code_point(char_of_byte(static_cast<uint8_t>(c)), out);
  return out;
}

}  // namespace lantern::byte_level
