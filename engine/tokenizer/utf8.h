#pragma once
// UTF-8 helpers shared by the tokenizer's encoder, decoder and streaming decoder.
//
// Invalid input follows one rule everywhere: each *maximal subpart* of an
// ill-formed sequence becomes one U+FFFD (Unicode §3.9, "substitution of
// maximal subparts"). It is what Python's errors="replace", JavaScript's
// TextDecoder and Rust's String::from_utf8_lossy do, so text repaired here
// matches what a JS or Python caller would have handed to Hugging Face.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lantern::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// One step of decoding at the start of `s` (non-empty).
struct Step {
  uint32_t cp;     // the code point, or 0xFFFD when !valid
  uint32_t len;    // bytes consumed (>= 1)
  bool valid;      // a well-formed code point
  bool truncated;  // ill-formed only because `s` ended: a valid prefix of a code point
};
Step next(std::string_view s);

// Length of the longest well-formed prefix of `s` (== s.size() when valid).
size_t valid_prefix(std::string_view s);

// `s` with every maximal ill-formed subpart replaced by U+FFFD, appended to `out`.
void append_repaired(std::string_view s, std::string& out);

// Unicode White_Space (what HF's Rust code calls char::is_whitespace).
bool is_white_space(uint32_t cp);

// `s` without leading / trailing characters for which is_space(cp) holds.
std::string_view trim_left(std::string_view s, bool (*is_space)(uint32_t));
std::string_view trim_right(std::string_view s, bool (*is_space)(uint32_t));

// Appends the UTF-8 encoding of `cp` (must be a Unicode scalar value).
void append_code_point(uint32_t cp, std::string& out);

}  // namespace lantern::utf8
