#include "harness/experiment/experiment.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "harness/experiment/schema.h"
#include "kernels/base/json_parse.h"

namespace lantern::experiment {

namespace {

using nlohmann::json;

// Token counts and ids the workload stores as int: larger ones would wrap.
constexpr int64_t kMaxTokens = 1 << 24;
constexpr int64_t kMaxTokenId = INT32_MAX;

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// Invalid UTF-8 (a bare-word --set value) is replaced, never thrown about.
std::string short_json(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& c : p)
    if (c == '.') c = '/';
  return json::json_pointer(p);
}

// Collects problems as "FILE: $.path: problem (fix: ...)".
struct Checker {
  std::string file;
  std::vector<std::string> issues;

  // Keys and strings from the file are echoed: control characters are
  // escaped and a huge key is cut, so each problem stays one short line.
  void add(const std::string& path, const std::string& problem, const std::string& fix) {
    issues.push_back(cut_for_message(
        file + ": " + path + ": " + problem + (fix.empty() ? "" : " (fix: " + fix + ")"), 1500));
  }

  void unknown_key(const std::string& path, const std::string& key,
                   const std::vector<std::string>& valid) {
    std::string guess = did_you_mean(key, valid);
    add(path, "unknown key '" + cut_for_message(key) + "'",
        guess.empty() ? "valid keys here: " + join(valid, ", ") : "did you mean '" + guess + "'?");
  }

  bool range(const std::string& path, const Field& f, double x) {
    bool lo = !f.min || x >= *f.min, hi = !f.max || x <= *f.max;
    if (lo && hi) return true;
    auto num = [](double v) {
      return v == std::floor(v) && std::abs(v) < 1e15 ? strformat("%.0f", v) : strformat("%g", v);
    };
    const std::string r =
        "[" + (f.min ? num(*f.min) : "-inf") + ", " + (f.max ? num(*f.max) : "inf") + "]";
    add(path, "value " + num(x) + " is out of range " + r, "use a value in " + r);
    return false;
  }

  void value(const Field& f, const std::string& path, const json& v) {
    auto wrong_type = [&] {
      add(path,
          std::string("expected ") + kind_name(f.kind) + ", got " + v.type_name() + " " +
              short_json(v),
          std::string("write a value of type ") + kind_name(f.kind) +
              (f.def.is_null() ? "" : ", e.g. " + short_json(f.def)));
    };
    switch (f.kind) {
      case Kind::object:
        if (!v.is_object()) return wrong_type();
        object(f.path, path, v);
        return;
      case Kind::nullable_string:
        if (!v.is_null() && !v.is_string()) wrong_type();
        return;
      case Kind::string:
        if (!v.is_string()) return wrong_type();
        if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(),
                                            v.get<std::string>()) == f.choices.end()) {
          std::string guess = did_you_mean(v.get<std::string>(), f.choices);
          add(path, "'" + v.get<std::string>() + "' is not one of " + join(f.choices, ", "),
              guess.empty() ? "use one of them" : "did you mean '" + guess + "'?");
        }
        return;
      case Kind::integer:
        if (!v.is_number_integer()) return wrong_type();
        range(path, f, v.get<double>());
        return;
      case Kind::number:
        if (!v.is_number()) return wrong_type();
        range(path, f, v.get<double>());
        return;
      case Kind::boolean:
        if (!v.is_boolean()) wrong_type();
        return;
      case Kind::family_map:
        if (!v.is_object()) return wrong_type();
        for (auto& [k, x] : v.items())
          if (!x.is_string() && !(x.is_number_integer() && x.get<int64_t>() >= 0))
            add(path + "." + k, "expected a variant name or number, got " + short_json(x),
                "write e.g. \"seed\" or 2 (docs/kernels.md lists the variants)");
        return;
      case Kind::sweep_map:
        if (!v.is_object()) return wrong_type();
        sweep(path, v);
        return;
      case Kind::prompt_list:
        if (!v.is_array()) return wrong_type();
        for (size_t i = 0; i < v.size(); ++i) prompt(path + "[" + std::to_string(i) + "]", v[i]);
        return;
      case Kind::length_dist:
        if (!v.is_object()) return wrong_type();
        length_dist(path, v);
        return;
    }
  }

  void object(const std::string& parent, const std::string& path, const json& v) {
    std::vector<std::string> valid = child_keys(parent);
    for (auto& [k, x] : v.items()) {
      const Field* f = find_field(parent.empty() ? k : parent + "." + k);
      if (!f) {
        unknown_key(path, k, valid);
        continue;
      }
      value(*f, path + "." + k, x);
    }
  }

  void sweep(const std::string& path, const json& v) {
    for (auto& [k, x] : v.items()) {
      const Field* f = find_field(k);
      bool dynamic = k.rfind("kernels.", 0) == 0 && k.size() > 8;
      bool dist_key =
          k.rfind("workload.prompt_len.", 0) == 0 || k.rfind("workload.output_len.", 0) == 0;
      if (!dynamic && !dist_key && (!f || f->kind == Kind::object || f->kind == Kind::sweep_map)) {
        std::vector<std::string> leaves;
        for (const Field& g : schema())
          if (g.kind != Kind::object && g.kind != Kind::sweep_map) leaves.push_back(g.path);
        std::string guess = did_you_mean(k, leaves);
        add(path + "." + k, "'" + k + "' is not a field that can be swept",
            guess.empty() ? "use a field path such as limits.max_seqs"
                          : "did you mean '" + guess + "'?");
        continue;
      }
      if (!x.is_array() || x.empty())
        add(path + "." + k, "expected a non-empty array of values, got " + short_json(x),
            "write e.g. [1, 2, 4]");
      else if (f && !dynamic)
        for (size_t i = 0; i < x.size(); ++i)
          value(*f, path + "." + k + "[" + std::to_string(i) + "]", x[i]);
    }
  }

  void prompt(const std::string& path, const json& p) {
    if (p.is_string()) return;
    if (!p.is_object()) {
      add(path, std::string("expected a string or an object, got ") + p.type_name(),
          "write \"text\", {\"ids\": [128000, 9906]} or {\"chat\": [{\"role\": \"user\", "
          "\"content\": \"...\"}]}");
      return;
    }
    int forms = 0;
    for (auto& [k, x] : p.items()) {
      if (std::find(prompt_keys().begin(), prompt_keys().end(), k) == prompt_keys().end()) {
        unknown_key(path, k, prompt_keys());
        continue;
      }
      const std::string kp = path + "." + k;
      if (k == "text") {
        ++forms;
        if (!x.is_string()) add(kp, "expected a string", "write the prompt text");
      } else if (k == "ids") {
        ++forms;
        bool ok = x.is_array() && !x.empty();
        if (ok)
          for (const json& id : x)
            ok = ok && id.is_number_integer() && id.get<int64_t>() >= 0 &&
                 id.get<int64_t>() <= kMaxTokenId;
        if (!ok)
          add(kp, "expected a non-empty array of token ids (integers in [0, 2147483647])",
              "write e.g. [128000, 9906]");
      } else if (k == "chat") {
        ++forms;
        chat(kp, x);
      } else if (k == "max_new_tokens") {
        if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > kMaxTokens)
          add(kp, "expected an integer in [1, 16777216], got " + short_json(x), "write e.g. 32");
      } else if (k == "tag" && !x.is_string()) {
        add(kp, "expected a string", "write a short label");
      }
    }
    if (forms != 1)
      add(path,
          forms == 0 ? "a prompt needs one of text, ids or chat"
                     : "a prompt has more than one of text, ids, chat",
          "keep exactly one");
  }

  void chat(const std::string& path, const json& x) {
    if (!x.is_array() || x.empty()) {
      add(path, "expected a non-empty array of messages",
          "write [{\"role\": \"user\", \"content\": \"...\"}]");
      return;
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const std::string mp = path + "[" + std::to_string(i) + "]";
      const json& m = x[i];
      if (!m.is_object() || !m.contains("role") || !m.contains("content") ||
          !m["role"].is_string() || !m["content"].is_string() || m.size() != 2) {
        add(mp, "expected {\"role\": \"...\", \"content\": \"...\"}",
            "give exactly role and content, both strings");
        continue;
      }
      const std::string role = m["role"];
      if (role != "system" && role != "user" && role != "assistant")
        add(mp + ".role", "'" + role + "' is not one of system, user, assistant",
            "use one of them");
    }
  }

  void length_dist(const std::string& path, const json& v) {
    const auto& keys = length_dist_keys();
    for (auto& [k, x] : v.items()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        unknown_key(path, k, keys);
        continue;
      }
      if (k == "dist") {
        static const Field f{
            "dist", Kind::string, "fixed", {}, {}, {"fixed", "uniform", "normal", "lognormal"}, ""};
        value(f, path + ".dist", x);
      } else {
        const bool zero_ok = k == "stddev" || k == "sigma" || k == "min" || k == "max";
        // sigma multiplies a log: e^16 is already 8.9 million times the median.
        const double hi = k == "sigma" ? 16 : static_cast<double>(kMaxTokens);
        if (!x.is_number() || x.get<double>() < (zero_ok ? 0 : 1) || x.get<double>() > hi)
          add(path + "." + k,
              std::string("expected a number in [") + (zero_ok ? "0" : "1") + ", " +
                  (k == "sigma" ? "16" : "16777216") + "], got " + short_json(x),
              "write a token count");
      }
    }
    if (v.contains("dist") && !v["dist"].is_string()) return;  // reported above
    const std::string dist = v.value("dist", std::string("fixed"));
    auto need = [&](const char* key) {
      if (!v.contains(key))
        add(path, "dist '" + dist + "' needs '" + key + "'", std::string("add \"") + key + "\"");
    };
    if (dist == "fixed") need("value");
    if (dist == "uniform") {
      need("min");
      need("max");
    }
    if (dist == "normal") {
      need("mean");
      need("stddev");
    }
    if (dist == "lognormal") {
      need("median");
      need("sigma");
    }
    // max 0 means "no cap", except for uniform, where it is the top of the range.
    if (v.contains("min") && v.contains("max") && v["min"].is_number() && v["max"].is_number() &&
        (v["max"].get<double>() > 0 || dist == "uniform") &&
        v["min"].get<double>() > v["max"].get<double>())
      add(path, "min " + v["min"].dump() + " is above max " + v["max"].dump(), "swap them");
  }
};

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
  json::json_pointer ptr = pointer(o.path);
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

}  // namespace lantern::experiment
