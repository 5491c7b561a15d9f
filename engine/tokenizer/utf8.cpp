#include "engine/tokenizer/utf8.h"

#include <cstring>

namespace lantern::utf8 {

Step next(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true, false};
  // Table 3-7 of the Unicode standard: the lead byte fixes the length and the
  // allowed range of the second byte (which excludes overlongs and surrogates).
  uint32_t need, cp;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0xFFFD, 1, false, false};  // continuation byte or C0, C1, F5..FF
  }
  for (uint32_t i = 1; i <= need; ++i) {
    if (i >= n) return {0xFFFD, i, false, true};
    const uint8_t b = p[i];
    if (b < lo || b > hi) return {0xFFFD, i, false, false};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {cp, need + 1, true, false};
}

size_t valid_prefix(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // Most text is ASCII: skip it eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    Step st = next(s.substr(i));
    if (!st.valid) return i;
    i += st.len;
  }
  return n;
}

void append_repaired(std::string_view s, std::string& out) {
  out.reserve(out.size() + s.size());
  while (!s.empty()) {
    size_t good = valid_prefix(s);
    out.append(s.data(), good);
    s.remove_prefix(good);
    if (s.empty()) break;
    Step st = next(s);
    out.append(kReplacement);
    s.remove_prefix(st.len);
  }
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string_view trim_left(std::string_view s, bool (*is_space)(uint32_t)) {
  while (!s.empty()) {
    Step st = next(s);
    if (!st.valid || !is_space(st.cp)) break;
    s.remove_prefix(st.len);
  }
  return s;
}

std::string_view trim_right(std::string_view s, bool (*is_space)(uint32_t)) {
  while (!s.empty()) {
    size_t start = s.size() - 1;  // back over continuation bytes to the last character's start
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80 && s.size() - start < 4)
      --start;
    Step st = next(s.substr(start));
    if (!st.valid || start + st.len != s.size() || !is_space(st.cp)) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

void append_code_point(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace lantern::utf8
