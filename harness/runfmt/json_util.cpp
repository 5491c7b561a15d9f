#include "harness/runfmt/json_util.h"

#include "kernels/base/json_parse.h"

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <sstream>

namespace lantern::runfmt::detail {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  std::ifstream in(path, std::ios::binary);
  LANTERN_CHECK(in.good(), "%s: cannot open %s (%s)", name.c_str(), path.c_str(),
                std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  LANTERN_CHECK(!in.bad(), "%s: cannot read %s (%s)", name.c_str(), path.c_str(), std::strerror(errno));
  return parse_json_text(buffer.str(), name);
}

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  LANTERN_CHECK(out.good(), "cannot write %s (%s)", path.c_str(), std::strerror(errno));
  out << text;
  out.close();
  LANTERN_CHECK(out.good(), "writing %s failed (%s)", path.c_str(), std::strerror(errno));
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& j, int indent) {
  write_text_file(path, j.dump(indent) + "\n");
}

const nlohmann::json& need(const nlohmann::json& obj, const char* key, const std::string& file,
                           const std::string& where) {
  LANTERN_CHECK(obj.is_object(), "%s: '%s' should be an object, got %s", file.c_str(),
                where.empty() ? "(top level)" : where.c_str(), obj.type_name());
  auto it = obj.find(key);
  LANTERN_CHECK(it != obj.end(), "%s: missing key '%s%s'", file.c_str(), where.c_str(), key);
  return *it;
}

std::string shortest(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  LANTERN_ASSERT(ec == std::errc(), "to_chars failed");
  return std::string(buf, end);
}

std::string hex_address(uint64_t address) { return strformat("0x%" PRIx64, address); }

uint64_t parse_hex_address(const nlohmann::json& v, const std::string& file,
                           const std::string& key) {
  LANTERN_CHECK(v.is_string(), "%s: '%s' should be a \"0x...\" address string, got %s",
                file.c_str(), key.c_str(), v.type_name());
  const std::string& s = v.get_ref<const std::string&>();
  char* end = nullptr;
  errno = 0;
  uint64_t x = std::strtoull(s.c_str(), &end, 16);
  LANTERN_CHECK(s.rfind("0x", 0) == 0 && s.size() > 2 && end && *end == '\0' && errno == 0,
                "%s: '%s' is not a hex address: '%s'", file.c_str(), key.c_str(), s.c_str());
  return x;
}

}  // namespace lantern::runfmt::detail
