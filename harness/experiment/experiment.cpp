#include "harness/experiment/experiment.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "harness/experiment/checker.h"
#include "harness/experiment/schema.h"
#include "kernels/base/json_parse.h"

namespace lantern::experiment {

namespace {

using nlohmann::json;

// A dotted path as a JSON pointer: dots separate keys; a key's own '~' and
// '/' are escaped (RFC 6901: ~0, ~1) -- kernel-family keys may hold anything.
json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/";
  for (char c : dotted) {
    if (c == '.') p += '/';
    else if (c == '~') p += "~0";
    else if (c == '/') p += "~1";
    else p += c;
  }
  return json::json_pointer(p);
}

// Checks among fields that need no model: one line each.
void contradictions(const Experiment& e, Checker& c) {
  const json& w = e.resolved["workload"];
  const int max_context = e.resolved["limits"]["max_context"];
  const std::string kind = w["kind"];
  if (kind == "prompts" && w["prompts"].empty())
    c.add("$.workload.prompts", "workload.kind is prompts but the list is empty",
          "add prompts or set workload.kind to synthetic or requests");
  if (kind == "requests") {
    const std::string file = w["requests_file"];
    if (file.empty())
      c.add("$.workload.requests_file", "workload.kind is requests but no requests_file is given",
            "name a .jsonl file");
    else if (!std::filesystem::exists(e.base_dir / file) && !std::filesystem::exists(file))
      c.add("$.workload.requests_file", "file '" + file + "' does not exist",
            "give a path relative to the experiment file or the working directory");
  }
  if (kind == "prompts")
    for (size_t i = 0; i < w["prompts"].size(); ++i) {
      const json& p = w["prompts"][i];
      if (p.is_object() && p.contains("ids") && p["ids"].is_array() &&
          static_cast<int>(p["ids"].size()) >= max_context)
        c.add("$.workload.prompts[" + std::to_string(i) + "].ids",
              "prompt of " + std::to_string(p["ids"].size()) +
                  " tokens does not fit limits.max_context = " + std::to_string(max_context),
              "shorten the prompt or raise limits.max_context");
    }
  if (kind == "synthetic") {
    auto low = [](const json& d) {
      const std::string dist = d.value("dist", "fixed");
      if (dist == "fixed") return d.value("value", 1.0);
      return d.value("min", 1.0);
    };
    double plo = low(w["prompt_len"]), olo = low(w["output_len"]);
    if (plo >= max_context)
      c.add("$.workload.prompt_len",
            "prompts of at least " + std::to_string(static_cast<long>(plo)) +
                " tokens do not fit limits.max_context = " + std::to_string(max_context),
            "lower the prompt length or raise limits.max_context");
    else if (plo + olo > max_context)
      c.add("$.workload.output_len",
            "prompt + output of at least " + std::to_string(static_cast<long>(plo + olo)) +
                " tokens exceed limits.max_context = " + std::to_string(max_context),
            "lower the lengths or raise limits.max_context");
  }
  const json& limits = e.resolved["limits"];
  if (limits["max_seqs"].get<int>() > limits["max_batch_tokens"].get<int>())  // EngineLimits::validate
    c.add("$.limits.max_seqs",
          "limits.max_seqs = " + limits["max_seqs"].dump() + " exceeds limits.max_batch_tokens = " +
              limits["max_batch_tokens"].dump() + " (every running sequence needs a row per step)",
          "raise max_batch_tokens or lower max_seqs");
  if (e.resolved["limits"]["kv_block_size"].get<int>() > max_context)
    c.add("$.limits.kv_block_size", "a KV block is larger than limits.max_context",
          "lower kv_block_size");
  if (!e.resolved["model"]["path"].is_null() && e.resolved["model"]["preset"] != "auto")
    c.add("$.model", "both model.path and model.preset are set",
          "keep one: a directory or a synthetic preset");
  if (e.resolved["sweep"].contains("sweep"))
    c.add("$.sweep", "a sweep cannot sweep itself", "remove the key");
}

}  // namespace

ExperimentError::ExperimentError(std::vector<std::string> lines)
    : Error(join(lines, "\n")), lines_(std::move(lines)) {}

std::string json_path(const std::string& dotted) {
  return "$." + dotted;
}

const json& Experiment::at(const std::string& dotted) const {
  return resolved.at(pointer(dotted));
}

void check_override_path(const std::string& path) {
  if (find_field(path)) return;
  auto dot = path.rfind('.');
  if (dot != std::string::npos) {
    const Field* parent = find_field(path.substr(0, dot));
    if (parent && (parent->kind == Kind::family_map || parent->kind == Kind::sweep_map)) return;
    if (parent && parent->kind == Kind::length_dist) {
      const std::string key = path.substr(dot + 1);
      const auto& keys = length_dist_keys();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
    }
  }
  std::vector<std::string> leaves;
  for (const Field& f : schema()) leaves.push_back(f.path);
  std::string guess = did_you_mean(path, leaves);
  LANTERN_FAIL("--set %s: no such field (fix: %s)", cut_for_message(path).c_str(),
               guess.empty() ? "docs/experiments.md lists the fields"
                             : ("did you mean " + guess + "?").c_str());
}

Override parse_override(const std::string& text) {
  auto eq = text.find('=');
  LANTERN_CHECK(eq != std::string::npos && eq > 0,
                "--set '%s' must look like path=value (fix: e.g. --set limits.max_seqs=4)",
                cut_for_message(text).c_str());
  Override o;
  o.text = text;
  o.path = text.substr(0, eq);
  const std::string raw = text.substr(eq + 1);
  o.value = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (o.value.is_discarded()) o.value = raw;  // a bare word is a string
  check_override_path(o.path);
  try {
    (void)o.value.dump();  // the manifest records it: it must be valid UTF-8
  } catch (const json::type_error&) {
    LANTERN_FAIL("--set %s: the value is not valid UTF-8 (fix: write it in UTF-8)",
                 o.path.c_str());
  }
  return o;
}

void apply_override(json& doc, const Override& o) {
  // Create parents that the file left out (they get defaults later).
  json* cur = &doc;
  std::string token;
  std::stringstream ss(o.path);
  std::vector<std::string> parts;
  while (std::getline(ss, token, '.')) parts.push_back(token);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!cur->is_object()) *cur = json::object();
    cur = &(*cur)[parts[i]];
  }
  if (!cur->is_object()) *cur = json::object();
  (*cur)[parts.back()] = o.value;
}

json load_json_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  LANTERN_CHECK(in, "%s: cannot open the file (fix: check the path)", file.c_str());
  std::stringstream buf;
  buf << in.rdbuf();
  // Bounded nesting and duplicate keys refused (json_parse.h), syntax errors
  // with line and column.
  try {
    return parse_json_text(buf.str(), file.string());
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(" is not valid JSON (") == std::string::npos) throw;
    LANTERN_FAIL("%s (fix: check the commas and quotes there)", what.c_str());
  }
}

std::vector<std::string> validate(const json& doc, const std::string& file) {
  Checker c{file, {}};
  if (!doc.is_object()) {
    c.add("$", std::string("expected an object, got ") + doc.type_name(),
          "write { \"name\": ..., ... }");
    return c.issues;
  }
  if (doc.contains("schema_version") && doc["schema_version"].is_number_integer() &&
      doc["schema_version"].get<int>() > kSchemaVersion)
    c.add("$.schema_version",
          "version " + doc["schema_version"].dump() + " is newer than this build reads (" +
              std::to_string(kSchemaVersion) + ")",
          "update Lantern");
  else
    c.object("", "$", doc);
  return c.issues;
}

Experiment resolve(json doc, const std::string& file, const std::vector<Override>& overrides,
                   const std::optional<std::filesystem::path>& base_dir) {
  for (const Override& o : overrides) apply_override(doc, o);
  std::vector<std::string> issues = validate(doc, file);
  if (!issues.empty()) throw ExperimentError(issues);
  Experiment e;
  e.file = file;
  e.base_dir = base_dir ? *base_dir : std::filesystem::path(file).parent_path();
  e.overrides = overrides;
  e.resolved = defaults();
  // Length distributions replace their default as a whole (a uniform
  // distribution must not inherit the fixed default's "value").
  json merged = e.resolved;
  merged.merge_patch(doc);
  for (const char* d : {"prompt_len", "output_len"})
    if (doc.contains("workload") && doc["workload"].contains(d))
      merged["workload"][d] = doc["workload"][d];
  if (doc.contains("model") && doc["model"].contains("path"))
    merged["model"]["path"] = doc["model"]["path"];
  e.resolved = merged;
  if (e.resolved["name"].get<std::string>().empty())
    e.resolved["name"] = file.empty() ? "experiment" : std::filesystem::path(file).stem().string();
  Checker c{file, {}};
  contradictions(e, c);
  if (!c.issues.empty()) throw ExperimentError(c.issues);
  return e;
}

Experiment load_experiment(const std::filesystem::path& file,
                           const std::vector<Override>& overrides) {
  return resolve(load_json_file(file), file.string(), overrides);
}

std::vector<std::string> check_against(const Experiment& e, const ModelFacts& facts) {
  Checker c{e.file, {}};
  const json& kernels = e.resolved["kernels"];
  std::vector<std::string> families;
  for (const auto& [f, _] : facts.kernel_variants) families.push_back(f);
  for (auto& [family, v] : kernels.items()) {
    auto it = facts.kernel_variants.find(family);
    if (it == facts.kernel_variants.end()) {
      c.unknown_key("$.kernels", family, families);
      continue;
    }
    const std::string want =
        v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>());
    if (std::find(it->second.begin(), it->second.end(), want) == it->second.end())
      c.add("$.kernels." + family, "unknown variant '" + want + "' for this backend",
            "valid: " + join(it->second, ", "));
  }
  const int max_context = e.resolved["limits"]["max_context"];
  if (facts.max_position_embeddings > 0 && max_context > facts.max_position_embeddings &&
      max_context != find_field("limits.max_context")->def.get<int>())
    c.add("$.limits.max_context",
          "limits.max_context = " + std::to_string(max_context) +
              " is above the model's max_position_embeddings = " +
              std::to_string(facts.max_position_embeddings),
          "lower it to at most " + std::to_string(facts.max_position_embeddings));
  return c.issues;
}

ModelFacts model_facts_from(const json& variants, int max_position_embeddings) {
  ModelFacts f;
  f.max_position_embeddings = max_position_embeddings;
  auto bad = [&](const std::string& why) {
    throw ExperimentError({"experiment.kernel_variants: " + why +
                           " (fix: record the run again with this lantern)"});
  };
  if (!variants.is_object()) bad("expected an object {family: [variants]}");
  for (const auto& [family, list] : variants.items()) {
    if (!list.is_array()) bad("'" + family + "' is not a list");
    std::vector<std::string>& names = f.kernel_variants[family];
    for (const json& v : list) {
      if (!v.is_object() || !v.contains("name") || !v["name"].is_string() ||
          !v.contains("variant") || !v["variant"].is_number_integer())
        bad("'" + family + "' holds an entry without a string name and an integer variant");
      names.push_back(v["name"].get<std::string>());
      names.push_back(std::to_string(v["variant"].get<int64_t>()));
    }
  }
  // EngineOptions::kernels' pseudo-families (fused or unfused op table;
  // prefill steps replayed from graphs or eager; overlapped decode steps; the pruned last layer; the
  // folded decode attention): not in the registry, so not
  // in the recorded list, valid on every backend.
  f.kernel_variants["fusion"] = {"on", "off"};
  f.kernel_variants["prefill_graphs"] = {"on", "off"};
  f.kernel_variants["overlap"] = {"on", "off"};
  f.kernel_variants["prune_last"] = {"on", "off"};
  f.kernel_variants["fold_attention"] = {"auto", "on", "off"};
  f.kernel_variants["final_fuse"] = {"on", "off"};
  return f;
}

void save_experiment_file(const std::filesystem::path& file, const json& experiment) {
  std::filesystem::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp);
    LANTERN_CHECK(out.good(), "%s: cannot write (fix: check that the folder exists and is writable)",
                  file.c_str());
    out << experiment.dump(2) << "\n";
    out.close();
    LANTERN_CHECK(out.good(), "%s: write failed (fix: check free space)", file.c_str());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) std::filesystem::remove(tmp);
  LANTERN_CHECK(!ec, "%s: cannot rename the written file into place: %s", file.c_str(),
                ec.message().c_str());
}

}  // namespace lantern::experiment
