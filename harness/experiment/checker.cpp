// The experiment document's validation walk (checker.h).
#include "harness/experiment/checker.h"

#include <algorithm>
#include <cmath>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"

namespace lantern::experiment {

using nlohmann::json;

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string short_json(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// Keys and strings from the file are echoed: control characters are
// escaped and a huge key is cut, so each problem stays one short line.
void Checker::add(const std::string& path, const std::string& problem, const std::string& fix) {
  issues.push_back(cut_for_message(
      file + ": " + path + ": " + problem + (fix.empty() ? "" : " (fix: " + fix + ")"), 1500));
}

void Checker::unknown_key(const std::string& path, const std::string& key, const std::vector<std::string>& valid) {
  std::string guess = did_you_mean(key, valid);
  add(path, "unknown key '" + cut_for_message(key) + "'", guess.empty() ? "valid keys here: " + join(valid, ", ") : "did you mean '" + guess + "'?");
}

bool Checker::range(const std::string& path, const Field& f, double x) {
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

void Checker::value(const Field& f, const std::string& path, const json& v) {
  auto wrong_type = [&] {
    add(path, std::string("expected ") + kind_name(f.kind) + ", got " + v.type_name() + " " +
            short_json(v), std::string("write a value of type ") + kind_name(f.kind) +
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
      if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), v.get<std::string>()) == f.choices.end()) {
        std::string guess = did_you_mean(v.get<std::string>(), f.choices);
        add(path, "'" + v.get<std::string>() + "' is not one of " + join(f.choices, ", "), guess.empty() ? "use one of them" : "did you mean '" + guess + "'?");
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
          add(path + "." + k, "expected a variant name or number, got " + short_json(x), "write e.g. \"seed\" or 2 (docs/kernels.md lists the variants)");
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

void Checker::object(const std::string& parent, const std::string& path, const json& v) {
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

void Checker::sweep(const std::string& path, const json& v) {
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
      add(path + "." + k, "'" + k + "' is not a field that can be swept", guess.empty() ? "use a field path such as limits.max_seqs"
                        : "did you mean '" + guess + "'?");
      continue;
    }
    if (!x.is_array() || x.empty())
      add(path + "." + k, "expected a non-empty array of values, got " + short_json(x), "write e.g. [1, 2, 4]");
    else if (f && !dynamic)
      for (size_t i = 0; i < x.size(); ++i)
        value(*f, path + "." + k + "[" + std::to_string(i) + "]", x[i]);
  }
}

void Checker::prompt(const std::string& path, const json& p) {
  if (p.is_string()) return;
  if (!p.is_object()) {
    add(path, std::string("expected a string or an object, got ") + p.type_name(), "write \"text\", {\"ids\": [128000, 9906]} or {\"chat\": [{\"role\": \"user\", "
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
        add(kp, "expected a non-empty array of token ids (integers in [0, 2147483647])", "write e.g. [128000, 9906]");
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
    add(path, forms == 0 ? "a prompt needs one of text, ids or chat"
                   : "a prompt has more than one of text, ids, chat", "keep exactly one");
}

void Checker::chat(const std::string& path, const json& x) {
  if (!x.is_array() || x.empty()) {
    add(path, "expected a non-empty array of messages", "write [{\"role\": \"user\", \"content\": \"...\"}]");
    return;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const std::string mp = path + "[" + std::to_string(i) + "]";
    const json& m = x[i];
    if (!m.is_object() || !m.contains("role") || !m.contains("content") ||
        !m["role"].is_string() || !m["content"].is_string() || m.size() != 2) {
      add(mp, "expected {\"role\": \"...\", \"content\": \"...\"}", "give exactly role and content, both strings");
      continue;
    }
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant")
      add(mp + ".role", "'" + role + "' is not one of system, user, assistant", "use one of them");
  }
}

void Checker::length_dist(const std::string& path, const json& v) {
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
        add(path + "." + k, std::string("expected a number in [") + (zero_ok ? "0" : "1") + ", " +
                (k == "sigma" ? "16" : "16777216") + "], got " + short_json(x), "write a token count");
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

}  // namespace lantern::experiment
