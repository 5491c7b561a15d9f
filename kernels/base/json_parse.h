#pragma once
// JSON parsing for files a user hands us (config.json, tokenizer.json,
// safetensors headers, run directories, stdin). nlohmann's parser and its
// recursive dump()/destructor overflow the stack on hostile nesting, accept
// duplicate keys (last wins) and throw exceptions whose text names neither the
// file nor the fix. Every caller goes through here instead:
//   - nesting deeper than kMaxJsonDepth is refused before nlohmann sees it;
//   - duplicate object keys are an error naming the key;
//   - syntax errors and number overflow become one line
//     "<what> is not valid JSON (line L, column C: <reason>)".
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lantern {

// Real files nest a handful of levels (tokenizer.json ~6, traces ~5).
constexpr int kMaxJsonDepth = 256;

// Parses `text`; `what` names the source in errors (a path, "stdin line 3").
nlohmann::json parse_json_text(std::string_view text, const std::string& what);

// Reads and parses a file; "cannot read <path>: <strerror>" when it cannot.
nlohmann::json parse_json_file(const std::filesystem::path& path, const std::string& what = "");

// Reads a whole file as bytes; throws "cannot read <path>: <reason>" (a
// directory, a missing or unreadable file).
std::string read_file_bytes(const std::filesystem::path& path);

// nlohmann's exception text without its "[json.exception.type_error.302] "
// prefix, cut to one short line.
std::string json_error_reason(const std::exception& e);

// `s` cut to `max` bytes (at a UTF-8 boundary) with "... (N bytes)" appended,
// so an error never echoes a 20 KB input; control characters become \xNN so
// it stays one line.
std::string cut_for_message(std::string_view s, size_t max = 80);

}  // namespace lantern
