#pragma once
// GPT-2's byte-level alphabet, used by every ByteLevel BPE (Llama 3 included).
//
// Each byte 0..255 is shown as one printable code point so that vocab entries
// are readable strings: printable Latin-1 bytes stand for themselves, the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) become U+0100.. in
// byte order — which is why a space appears as "Ġ" (U+0120) in tokenizer.json.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lantern::byte_level {

// Code point that stands for byte `b`.
uint32_t char_of_byte(uint8_t b);

// The byte a code point stands for, or nullopt when it is not in the alphabet.
std::optional<uint8_t> byte_of_char(uint32_t cp);

// Maps a vocab string (UTF-8, in the byte-level alphabet) back to raw bytes.
// Returns nullopt when some character is outside the alphabet.
std::optional<std::string> decode(std::string_view token);

// The byte-level form of raw bytes (what tokenizer.json's vocab keys look like).
std::string encode(std::string_view bytes);

}  // namespace lantern::byte_level
