// Bounded, duplicate-checking JSON parsing with one-line errors (json_parse.h).
#include "engine/json_parse.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "engine/common.h"

namespace lantern {

namespace {

using nlohmann::json;

// Depth of [ and { outside strings; stops at the first level past the bound
// (nlohmann's DOM is built and torn down recursively).
void check_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      LANTERN_CHECK(++depth <= kMaxJsonDepth,
                    "%s: JSON nested deeper than %d levels at byte %zu: not a file Lantern reads",
                    what.c_str(), kMaxJsonDepth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

// "[json.exception.parse_error.101] parse error at line 1, column 2: x" -> "line 1, column 2: x"
std::string json_error_reason(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0) {
    size_t close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  if (s.rfind("parse error at ", 0) == 0) s = s.substr(15);
  return cut_for_message(s, 160);
}

std::string cut_for_message(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
  return std::string(s.substr(0, n)) + strformat("... (%zu bytes)", s.size());
}

json parse_json_text(std::string_view text, const std::string& what) {
  check_depth(text, what);
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  std::string duplicate;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get_ref<const std::string&>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    LANTERN_FAIL("%s is not valid JSON (%s)", what.c_str(), json_error_reason(e).c_str());
  }
  LANTERN_CHECK(duplicate.empty(), "%s: key \"%s\" appears twice in one object: remove one",
                what.c_str(), cut_for_message(duplicate).c_str());
  return j;
}

std::string read_file_bytes(const std::filesystem::path& path) {
  std::error_code ec;
  LANTERN_CHECK(!std::filesystem::is_directory(path, ec), "cannot read %s: it is a directory",
                path.c_str());
  std::ifstream in(path, std::ios::binary);
  LANTERN_CHECK(in.good(), "cannot read %s: %s", path.c_str(), std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  LANTERN_CHECK(!in.bad(), "cannot read %s: %s", path.c_str(), std::strerror(errno));
  return buffer.str();
}

json parse_json_file(const std::filesystem::path& path, const std::string& what) {
  return parse_json_text(read_file_bytes(path), what.empty() ? path.string() : what);
}

}  // namespace lantern
