// The JSON form of the GEMM plans chosen at start-up (engine/engine.h): what
// a run's manifest records and --gemm-plans reads back to pin them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace lantern {

nlohmann::json gemm_plan_json(const kernels::GemmPlan& p) {
  return {{"m_bucket", p.m_bucket},   {"m_timed", p.m_timed},
          {"n", p.n},                 {"k", p.k},
          {"out", p.c_f32 ? "f32" : "bf16"},
          {"align", p.align},         {"algo_id", p.algo_id},
          {"tile", p.tile},           {"stages", p.stages},
          {"split_k", p.split_k},     {"split_added", p.split_added},
          {"reduction", p.reduction}, {"swizzle", p.swizzle},
          {"custom", p.custom},       {"cluster", p.cluster},
          {"workspace", p.workspace}, {"workspace_limit", p.workspace_limit},
          {"candidates", p.candidates}, {"rank", p.rank},
          {"us", p.us},               {"heuristic_us", p.heuristic_us},
          {"timed", p.timed},         {"cold_l2", p.cold_l2},
          {"pinned", p.pinned}};
}

kernels::GemmPlan gemm_plan_from_json(const nlohmann::json& j) {
  kernels::GemmPlan p;
  p.m_bucket = j.at("m_bucket").get<int>();
  p.m_timed = j.value("m_timed", 0);
  p.n = j.at("n").get<int>();
  p.k = j.at("k").get<int>();
  p.c_f32 = j.at("out").get<std::string>() == "f32";
  p.align = j.at("align").get<int>();
  p.algo_id = j.at("algo_id").get<int>();
  p.tile = j.at("tile").get<int>();
  p.stages = j.at("stages").get<int>();
  p.split_k = j.at("split_k").get<int>();
  p.split_added = j.value("split_added", false);
  p.reduction = j.at("reduction").get<int>();
  p.swizzle = j.at("swizzle").get<int>();
  p.custom = j.at("custom").get<int>();
  p.cluster = j.at("cluster").get<int>();
  p.workspace = j.value("workspace", size_t(0));
  p.workspace_limit = j.at("workspace_limit").get<size_t>();
  p.candidates = j.value("candidates", 0);
  p.rank = j.value("rank", 0);
  p.us = j.value("us", 0.0);
  p.heuristic_us = j.value("heuristic_us", 0.0);
  p.timed = j.value("timed", false);
  p.cold_l2 = j.value("cold_l2", false);
  return p;
}

std::vector<kernels::GemmPlan> gemm_plans_from_json(const nlohmann::json& list) {
  std::vector<kernels::GemmPlan> plans;
  if (list.is_null()) return plans;
  for (const nlohmann::json& p : list) plans.push_back(gemm_plan_from_json(p));
  return plans;
}

nlohmann::json recorded_gemm_plans_json(const nlohmann::json& doc) {
  if (!doc.is_object()) return nullptr;
  if (doc.contains("config") && doc["config"].is_object() && doc["config"].contains("gemm_plans"))
    return doc["config"]["gemm_plans"];
  return doc.contains("gemm_plans") ? doc["gemm_plans"] : nlohmann::json(nullptr);
}

}  // namespace lantern
