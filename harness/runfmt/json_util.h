#pragma once
// Small JSON helpers shared by the run-directory writer and reader: every
// failure is one line naming the file and the key.
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"

namespace lantern::runfmt::detail {

// Reads and parses a whole JSON file; throws "<name>: cannot open" or
// "<name>: invalid JSON (...)" with `name` the file's name in the run directory.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Writes `j` (pretty-printed when indent >= 0) or throws naming the file.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j, int indent = 1);
void write_text_file(const std::filesystem::path& path, const std::string& text);

// Object member access with one-line errors: "<file>: missing key 'a.b'".
const nlohmann::json& need(const nlohmann::json& obj, const char* key, const std::string& file,
                           const std::string& where = "");

template <class T>
T need_as(const nlohmann::json& obj, const char* key, const std::string& file,
          const std::string& where = "") {
  const nlohmann::json& v = need(obj, key, file, where);
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    LANTERN_FAIL("%s: key '%s%s' has the wrong type (%s)", file.c_str(), where.c_str(), key,
                 v.type_name());
  }
}

template <class T>
T get_or(const nlohmann::json& obj, const char* key, T fallback, const std::string& file,
         const std::string& where = "") {
  if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
  return need_as<T>(obj, key, file, where);
}

// Shortest decimal text that parses back to exactly `x` ("nan"/"inf" never
// appear in our files: callers write optional values instead).
std::string shortest(double x);

// Addresses are written as "0x..." strings (JSON numbers lose bits past 2^53).
std::string hex_address(uint64_t address);
uint64_t parse_hex_address(const nlohmann::json& v, const std::string& file, const std::string& key);

}  // namespace lantern::runfmt::detail
