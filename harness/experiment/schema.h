#pragma once
// The experiment file's schema (version 1): every field with its type,
// default, range and one line of documentation. Validation, defaults,
// `--set` overrides and docs/experiments.md all come from this one table.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lantern::experiment {

constexpr int kSchemaVersion = 1;

enum class Kind {
  object,  // fixed keys (children in the table)
  string,
  integer,
  number,
  boolean,
  nullable_string,  // string or null
  family_map,       // {"<kernel family>": "variant name" | variant number}
  sweep_map,        // {"<field path>": [values...]}
  prompt_list,      // [ "text" | {"text"|"ids"|"chat", ...} ]
  length_dist,      // {"dist": fixed|uniform|normal|lognormal, ...}
};

struct Field {
  std::string path;  // dotted, e.g. "limits.max_seqs"
  Kind kind;
  nlohmann::json def;                // default (null for objects: built from children)
  std::optional<double> min, max;    // inclusive range (integer / number)
  std::vector<std::string> choices;  // allowed strings (empty: any)
  std::string doc;
};

const std::vector<Field>& schema();
const Field* find_field(const std::string& path);
// The names a key could have at `parent` ("" for the top level).
std::vector<std::string> child_keys(const std::string& parent);
// The closest of `candidates` to `word` (edit distance <= max(2, |word|/3)),
// or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// A complete experiment holding every default (name "", no workload prompts).
nlohmann::json defaults();
// Every field as a Markdown table (field, type, default, range, meaning):
// `lantern help schema`, kept in docs/experiments.md.
std::string schema_markdown();
// "integer", "number", "string", ...
const char* kind_name(Kind k);

// Keys of a length distribution and of a prompt object.
const std::vector<std::string>& length_dist_keys();
const std::vector<std::string>& prompt_keys();

}  // namespace lantern::experiment
