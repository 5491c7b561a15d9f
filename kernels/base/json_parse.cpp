// Bounded, duplicate-checking JSON parsing with one-line errors (json_parse.h).
#include "kernels/base/json_parse.h"

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "kernels/base/errors.h"

namespace lantern {

namespace {

using nlohmann::json;

// One pass over the text before nlohmann sees it: nesting depth (its DOM is
// built and torn down recursively) and duplicate keys (it keeps the last
// silently). Much cheaper than nlohmann's callback parser, which doubled the
// load time of a 9 MB tokenizer.json. Malformed text is left to nlohmann.
class PreScan {
 public:
  PreScan(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  void run() {
    for (size_t i = 0; i < text_.size(); ++i) {
      const char c = text_[i];
      if (c == '"') {
        const size_t end = string_end(i);
        if (expect_key()) add_key(text_.substr(i + 1, end - i - 1));
        i = end;
        continue;
      }
      if (c == '{' || c == '[') {
        LANTERN_CHECK(stack_.size() < static_cast<size_t>(kMaxJsonDepth),
                      "%s: JSON nested deeper than %d levels at byte %zu: not a file Lantern reads",
                      what_.c_str(), kMaxJsonDepth, i);
        stack_.push_back(Level{c == '{', true, {}});
      } else if (c == '}' || c == ']') {
        if (!stack_.empty()) stack_.pop_back();
      } else if (c == ',') {
        if (!stack_.empty()) stack_.back().key_next = true;
      }
    }
  }

 private:
  struct Level {
    bool object;
    bool key_next;  // the next string in this object is a key
    std::unordered_set<std::string_view> keys;
  };

  bool expect_key() {
    if (stack_.empty() || !stack_.back().object || !stack_.back().key_next) return false;
    stack_.back().key_next = false;
    return true;
  }

  size_t string_end(size_t open) const {
    for (size_t i = open + 1; i < text_.size(); ++i) {
      if (text_[i] == '\\') ++i;
      else if (text_[i] == '"') return i;
    }
    return text_.size();
  }

  void add_key(std::string_view raw) {
    std::string_view key = raw;
    if (raw.find('\\') != std::string_view::npos) {
      // Rare: compare escaped keys by their decoded text ("\u0061" == "a").
      std::string quoted(1, '"');
      quoted.append(raw);
      quoted.push_back('"');
      auto decoded = json::parse(quoted, nullptr, false);
      if (!decoded.is_string()) return;  // malformed: nlohmann reports it
      decoded_.push_back(decoded.get<std::string>());
      key = decoded_.back();
    }
    LANTERN_CHECK(stack_.back().keys.insert(key).second,
                  "%s: key \"%s\" appears twice in one object: remove one", what_.c_str(),
                  cut_for_message(key).c_str());
  }

  std::string_view text_;
  const std::string& what_;
  std::vector<Level> stack_;
  std::deque<std::string> decoded_;  // stable storage for decoded keys
};

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
  size_t n = s.size();
  if (n > max) {
    n = max;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
  }
  std::string out;
  for (char c : s.substr(0, n)) {
    // Control characters escaped: an error message is one line.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += strformat("\\x%02x", static_cast<unsigned char>(c));
    else
      out += c;
  }
  if (n < s.size()) out += strformat("... (%zu bytes)", s.size());
  return out;
}

json parse_json_text(std::string_view text, const std::string& what) {
  PreScan(text, what).run();
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    LANTERN_FAIL("%s is not valid JSON (%s)", what.c_str(), json_error_reason(e).c_str());
  }
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
