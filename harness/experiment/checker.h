#pragma once
// Validation of an experiment document against the schema (schema.h): the
// Checker walks the document and collects one line per problem as
// "FILE: $.path: problem (fix: ...)". Internal to harness/experiment/
// (experiment.cpp's validate, contradictions and check_against use it).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/experiment/schema.h"

namespace lantern::experiment {

// Token counts and ids the workload stores as int: larger ones would wrap.
constexpr int64_t kMaxTokens = 1 << 24;
constexpr int64_t kMaxTokenId = INT32_MAX;

std::string join(const std::vector<std::string>& v, const std::string& sep);
// A value as short JSON for a message; invalid UTF-8 (a bare-word --set
// value) is replaced, never thrown about.
std::string short_json(const nlohmann::json& v);

struct Checker {
  using json = nlohmann::json;
  std::string file;
  std::vector<std::string> issues;
  // Keys and strings from the file are echoed: control characters are
  // escaped and a huge key is cut, so each problem stays one short line.
  void add(const std::string& path, const std::string& problem, const std::string& fix);
  void unknown_key(const std::string& path, const std::string& key, const std::vector<std::string>& valid);
  bool range(const std::string& path, const Field& f, double x);
  void value(const Field& f, const std::string& path, const json& v);
  void object(const std::string& parent, const std::string& path, const json& v);
  void sweep(const std::string& path, const json& v);
  void prompt(const std::string& path, const json& p);
  void chat(const std::string& path, const json& x);
  void length_dist(const std::string& path, const json& v);
};

}  // namespace lantern::experiment
