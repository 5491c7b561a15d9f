#pragma once
// Experiment files: load, apply `--set` overrides, validate against the
// schema (schema.h), fill defaults. Every problem is one line naming the
// file, the JSON path and the fix; all problems are reported at once.
//
//   auto doc = load_json_file("experiments/decode-latency.json");
//   Experiment e = resolve(doc, "experiments/decode-latency.json",
//   {parse_override("limits.max_seqs=4")}); e.resolved["limits"]["max_seqs"] == 4
//
// Nothing here loads a model or touches a device: checks that need the
// model or the kernel registry take them through ModelFacts (check_against).
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/base/errors.h"

namespace lantern::experiment {

// One or more one-line problems; what() joins them with newlines.
class ExperimentError : public Error {
 public:
  explicit ExperimentError(std::vector<std::string> lines);
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
};

// `--set path=value`: value is JSON when it parses as JSON, else a string.
struct Override {
  std::string path;
  nlohmann::json value;
  std::string text;  // as given
};
Override parse_override(const std::string& text);  // throws naming --set and the fix
// Throws when `path` is not a field (with a did-you-mean).
void check_override_path(const std::string& path);
void apply_override(nlohmann::json& doc, const Override& o);

struct Experiment {
  std::string file;                // where it came from ("" for a manifest)
  std::filesystem::path base_dir;  // relative paths (requests_file) resolve here
  nlohmann::json resolved;         // every field, defaults filled in
  std::vector<Override> overrides;
  const nlohmann::json& at(const std::string& dotted) const;  // resolved value at "a.b.c"
  std::string name() const { return resolved.at("name").get<std::string>(); }
};

// Reads a JSON file (parse_json_text: bounded nesting, no duplicate keys);
// throws "FILE is not valid JSON (line L, column C: ...) (fix: ...)".
nlohmann::json load_json_file(const std::filesystem::path& file);
// Problems with a user document (before defaults), one line each.
std::vector<std::string> validate(const nlohmann::json& doc, const std::string& file);
// Overrides, validation, defaults, then the contradictions that need no
// model. Throws ExperimentError listing every problem.
// `base_dir` (default: the file's folder) is where relative paths resolve.
Experiment resolve(nlohmann::json doc, const std::string& file,
                   const std::vector<Override>& overrides,
                   const std::optional<std::filesystem::path>& base_dir = std::nullopt);
Experiment load_experiment(const std::filesystem::path& file,
                           const std::vector<Override>& overrides);

// What the model and the kernel registry say, for check_against.
struct ModelFacts {
  int max_position_embeddings = 0;  // 0: unknown
  // family -> valid variant names and numbers on the chosen backend.
  std::map<std::string, std::vector<std::string>> kernel_variants;
};
// Kernel families and variants, max_context vs the model: one line each.
std::vector<std::string> check_against(const Experiment& e, const ModelFacts& facts);
// Facts from what a run recorded: `variants` is the manifest's
// experiment.kernel_variants ({family: [{"variant": N, "name": "..."}]});
// throws ExperimentError when it has another shape.
ModelFacts model_facts_from(const nlohmann::json& variants, int max_position_embeddings);

// An experiment as a file: 2-space JSON and a newline, written to a
// temporary beside `file` and renamed over it (never half a file). Throws
// naming the file when it cannot be written.
void save_experiment_file(const std::filesystem::path& file, const nlohmann::json& experiment);

// "$.a.b" from "a.b".
std::string json_path(const std::string& dotted);

}  // namespace lantern::experiment
