#include "harness/experiment/sweep.h"

#include <sstream>

namespace lantern::experiment {

namespace {

nlohmann::json parse_value(const std::string& raw) {
  nlohmann::json v = nlohmann::json::parse(raw, nullptr, false);
  return v.is_discarded() ? nlohmann::json(raw) : v;
}

std::string value_label(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string last_component(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

SweepParam parse_sweep_param(const std::string& text) {
  auto eq = text.find('=');
  LANTERN_CHECK(
      eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
      "--param '%s' must look like path=v1,v2,... (fix: e.g. --param limits.max_seqs=1,2,4)",
      text.c_str());
  SweepParam p;
  p.path = text.substr(0, eq);
  check_override_path(p.path);
  std::stringstream ss(text.substr(eq + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    LANTERN_CHECK(!item.empty(),
                  "--param %s: empty value in the list (fix: remove the extra comma)",
                  p.path.c_str());
    p.values.push_back(parse_value(item));
  }
  return p;
}

std::vector<SweepParam> sweep_params_of(const nlohmann::json& doc) {
  std::vector<SweepParam> out;
  if (!doc.is_object() || !doc.contains("sweep") || !doc["sweep"].is_object()) return out;
  for (auto& [path, values] : doc["sweep"].items()) {
    SweepParam p{path, {}};
    for (const auto& v : values) p.values.push_back(v);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<SweepPoint> expand_grid(const std::vector<SweepParam>& params) {
  std::vector<SweepPoint> points(1);
  for (const SweepParam& p : params) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& base : points)
      for (const nlohmann::json& v : p.values) {
        SweepPoint q = base;
        q.overrides.push_back(Override{p.path, v, p.path + "=" + value_label(v)});
        q.label += (q.label.empty() ? "" : ",") + last_component(p.path) + "=" + value_label(v);
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

}  // namespace lantern::experiment
