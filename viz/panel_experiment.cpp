// Experiment panel: the run's manifest (GPU, driver, clocks, commit, weights)
// and resolved config; with a second run, configs diffed and metrics and
// per-op kernel times side by side with ratios; with a sweep directory, each
// metric plotted against the swept parameter (ImDrawList: no ImPlot in Debian).
// Beside the run's config, "Edit as new experiment" (panel_experiment_edit.cpp).
#include <algorithm>
#include <cmath>
#include <map>

#include "viz/model/experiment_model.h"
#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

std::string leaf(const nlohmann::json& j, std::initializer_list<const char*> path) { return json_text(j, path); }

nlohmann::json config_of(const RunData& r) {
  auto it = r.manifest.json.find("config");
  return it != r.manifest.json.end() && it->is_object() ? *it : nlohmann::json::object();
}

void manifest_summary(const RunData& run) {
  const nlohmann::json& m = run.manifest.json;
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", run.name.c_str());
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(0.65f, 0.65f, 0.65f, 1), "%s  (%s)", run.dir.c_str(), leaf(m, {"created_utc"}).c_str());
  const bool gpu = m.contains("gpu") && m["gpu"].is_object();
  ui::kv_line("backend", leaf(m, {"backend"}) + (run.manifest.complete ? "" : "   (INCOMPLETE run)"));
  ui::kv_line("GPU", gpu ? leaf(m, {"gpu", "name"}) + ", " + leaf(m, {"gpu", "sm_count"}) + " SMs, " +
                               ui::bytes(std::atof(leaf(m, {"gpu", "memory_bytes"}).c_str())) + ", cc " +
                               leaf(m, {"gpu", "compute_capability"})
                         : std::string("none (CPU run)"));
  if (gpu)
    ui::kv_line("clocks", "SM " + leaf(m, {"gpu", "sm_clock_khz"}) + " kHz, memory " +
                              leaf(m, {"gpu", "memory_clock_khz"}) + " kHz, bus " + leaf(m, {"gpu", "memory_bus_bits"}) +
                              " bit");
  if (const std::string c = run_clocks_line(m); !c.empty()) ui::kv_line("clocks in run", c);
  ui::kv_line("driver / CUDA", leaf(m, {"versions", "cuda_driver"}) + " / runtime " +
                                   leaf(m, {"versions", "cuda_runtime"}) + ", cuBLAS " + leaf(m, {"versions", "cublas"}));
  ui::kv_line("commit", leaf(m, {"git", "commit"}).substr(0, 12) +
                            (leaf(m, {"git", "dirty"}) == "true" ? " (dirty)" : "") + ", build " +
                            leaf(m, {"build", "type"}));
  std::string weights = "-";
  for (const auto& [k, v] : flatten(m))
    if (k.find("hash") != std::string::npos || k.find("sha") != std::string::npos)
      weights = k + " = " + (v.is_string() ? v.get<std::string>() : v.dump());
  ui::kv_line("weights", leaf(m, {"config", "model", "_name_or_path"}) != "-" ? leaf(m, {"config", "model", "_name_or_path"})
                                                                             : weights);
  ui::kv_line("roofline", run.manifest.copy_gb_per_s
                              ? ui::number(*run.manifest.copy_gb_per_s, 4) + " GB/s copy, " +
                                    ui::number(run.manifest.gemm_tflop_per_s.value_or(NAN), 4) + " TFLOP/s GEMM"
                              : std::string("- (not measured)"));
  ui::kv_line("host", leaf(m, {"host", "hostname"}) + ", " + leaf(m, {"host", "cpu"}) + ", " +
                          leaf(m, {"host", "cpu_cores"}) + " cores");
  ui::kv_line("command", leaf(m, {"command"}));
  const nlohmann::json& x = run.metrics;
  auto ms = [&](const char* k) { return leaf(x, {k, "p50"}) == "-" ? std::string("-") : ui::number(std::atof(leaf(x, {k, "p50"}).c_str()) * 1e3, 4) + " ms"; };
  ui::kv_line("throughput", leaf(x, {"tokens_per_s"}) == "-" ? std::string("-")
                                : ui::number(std::atof(leaf(x, {"tokens_per_s"}).c_str()), 4) + " tok/s over " +
                                      leaf(x, {"requests"}) + " requests; TTFT p50 " + ms("ttft_s") + ", TPOT p50 " + ms("tpot_s"));
}

void json_table(const char* id, const nlohmann::json& j, float height) {
  auto flat = flatten(j);
  if (!ImGui::BeginTable(id, 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV |
                                    ImGuiTableFlags_Resizable, ImVec2(0, height)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("key");
  ImGui::TableSetupColumn("value");
  ImGui::TableHeadersRow();
  for (const auto& [k, v] : flat) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(k.c_str());
    ImGui::TableNextColumn();
    std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    ImGui::TextUnformatted(s.c_str());
  }
  ImGui::EndTable();
}

void diff_table(const char* id, const std::vector<DiffRow>& rows, const char* a, const char* b, float height) {
  if (!ImGui::BeginTable(id, 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV |
                                    ImGuiTableFlags_Resizable, ImVec2(0, height)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("key");
  ImGui::TableSetupColumn(a);
  ImGui::TableSetupColumn(b);
  ImGui::TableSetupColumn("B / A");
  ImGui::TableHeadersRow();
  for (const DiffRow& r : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.key.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.a.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.b.c_str());
    ImGui::TableNextColumn();
    if (r.ratio) {
      const ImVec4 c = *r.ratio > 1.05 ? ImVec4(1, 0.7f, 0.4f, 1) : *r.ratio < 0.95 ? ImVec4(0.5f, 0.9f, 1, 1)
                                                                                  : ImVec4(0.8f, 0.8f, 0.8f, 1);
      ImGui::TextColored(c, "%.3fx", *r.ratio);
    }
  }
  ImGui::EndTable();
}

// Per-op mean kernel time of A and B, and B/A.
std::vector<DiffRow> op_times(const LoadedRun& a, const LoadedRun& b) {
  std::map<std::string, std::pair<const KernelStat*, const KernelStat*>> ops;
  for (const auto& s : a.by_op) ops[s.key].first = &s;
  for (const auto& s : b.by_op) ops[s.key].second = &s;
  std::vector<DiffRow> rows;
  for (const auto& [key, p] : ops) {
    DiffRow r;
    r.key = key;
    if (p.first) r.a = ui::duration(p.first->mean_us) + " x" + std::to_string(p.first->count);
    if (p.second) r.b = ui::duration(p.second->mean_us) + " x" + std::to_string(p.second->count);
    if (p.first && p.second && p.first->mean_us > 0) r.ratio = p.second->mean_us / p.first->mean_us;
    rows.push_back(r);
  }
  return rows;
}

// One metric against the swept parameter: axes, ticks, points and lines.
void sweep_plot(const Sweep& s, const std::string& param, const std::string& metric, ImVec2 size) {
  auto series = sweep_series(s, param, metric);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(size);
  const float x0 = p.x + 62, x1 = p.x + size.x - 12, y0 = p.y + 22, y1 = p.y + size.y - 24;
  dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), IM_COL32(30, 30, 34, 255));
  dl->AddText(ImVec2(x0, p.y + 2), ui::kText, (metric + "  vs  " + param).c_str());
  if (series.empty()) {
    dl->AddText(ImVec2(x0 + 8, y0 + 8), ui::kDimText, "no numeric points");
    return;
  }
  double xa = series.front().first, xb = series.back().first, ya = 0, yb = 0;
  for (auto& [x, y] : series) ya = std::min(ya, y), yb = std::max(yb, y);
  if (xb <= xa) xb = xa + 1;
  if (yb <= ya) yb = ya + 1;
  yb *= 1.1;
  ui::value_axis(dl, x0, y0, y1, ya, yb, "");
  const double xt = ui::nice_step(xb - xa, 6);
  auto X = [&](double x) { return x0 + 10 + static_cast<float>((x - xa) / (xb - xa)) * (x1 - x0 - 20); };
  auto Y = [&](double y) { return y1 - static_cast<float>((y - ya) / (yb - ya)) * (y1 - y0); };
  for (double x = std::ceil(xa / xt) * xt; x <= xb; x += xt) {
    dl->AddLine(ImVec2(X(x), y1), ImVec2(X(x), y1 + 4), ui::kDimText);
    dl->AddText(ImVec2(X(x) - 8, y1 + 5), ui::kDimText, ui::number(x, 4).c_str());
  }
  const ImU32 c = ui::color_for_name(metric);
  for (size_t i = 0; i < series.size(); ++i) {
    ImVec2 pt(X(series[i].first), Y(series[i].second));
    if (i) dl->AddLine(ImVec2(X(series[i - 1].first), Y(series[i - 1].second)), pt, c, 2);
    dl->AddCircleFilled(pt, 4, c);
    const std::string label = ui::number(series[i].second, 3);
    const float lx = std::min(pt.x + 5, x1 - ImGui::CalcTextSize(label.c_str()).x - 2);
    dl->AddText(ImVec2(lx, pt.y - 16), ui::kText, label.c_str());
  }
}

}  // namespace

void View::draw_experiment() {
  if (!ImGui::BeginTabBar("##exp")) return;
  if (runs_[0] && ImGui::BeginTabItem("Run")) {
    draw_experiment_run();
    ImGui::EndTabItem();
  }
  // With two runs the comparison is what the user came for: open on it once.
  const ImGuiTabItemFlags ab_flags = exp_.ab_shown ? 0 : ImGuiTabItemFlags_SetSelected;
  if (runs_[0] && runs_[1]) exp_.ab_shown = true;
  if (runs_[0] && runs_[1] && ImGui::BeginTabItem("A vs B", nullptr, ab_flags)) {
    draw_experiment_ab();
    ImGui::EndTabItem();
  }
  const ImGuiTabItemFlags sweep_flags = exp_.sweep_shown ? 0 : ImGuiTabItemFlags_SetSelected;
  if (sweep_) exp_.sweep_shown = true;
  if (sweep_ && ImGui::BeginTabItem("Sweep", nullptr, sweep_flags)) {
    draw_experiment_sweep();
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

// The manifest, the resolved config and the metrics; beside them the editor
// when the run holds a resolved experiment (`lantern run`).
void View::draw_experiment_run() {
  const RunData& a = runs_[0]->data;
  if (exp_.edit.run_dir != a.dir) reset_experiment_edit();
  const bool editable = exp_.edit.source.has_value();
  const float half = (ImGui::GetContentRegionAvail().x - 8) / 2;
  if (editable) ImGui::BeginChild("##runinfo", ImVec2(half, 0));
  manifest_summary(a);
  if (!editable) ImGui::TextColored(ImVec4(0.65f, 0.65f, 0.65f, 1), "editing: %s", exp_.edit.unavailable.c_str());
  ImGui::Separator();
  if (editable) {  // config over metrics, the editor on the right
    const float h = (ImGui::GetContentRegionAvail().y - 2 * ImGui::GetTextLineHeightWithSpacing()) / 2;
    ImGui::TextUnformatted("resolved config");
    json_table("##config", config_of(a), h);
    ImGui::TextUnformatted("metrics");
    json_table("##metrics", a.metrics, 0);
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("##edit", ImVec2(0, 0), true);
    draw_experiment_edit();
    ImGui::EndChild();
    return;
  }
  ImGui::BeginChild("##cfg", ImVec2(half, 0));
  ImGui::TextUnformatted("resolved config");
  json_table("##config", config_of(a), 0);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("##met", ImVec2(0, 0));
  ImGui::TextUnformatted("metrics");
  json_table("##metrics", a.metrics, 0);
  ImGui::EndChild();
}

void View::draw_experiment_ab() {
  const LoadedRun &a = *runs_[0], &b = *runs_[1];
  ImGui::Text("A: %s    B: %s", a.data.name.c_str(), b.data.name.c_str());
  const float h = (ImGui::GetContentRegionAvail().y - 3 * ImGui::GetTextLineHeightWithSpacing()) / 3;
  ImGui::TextUnformatted("config differences");
  diff_table("##cfgdiff", diff_json(config_of(a.data), config_of(b.data)), "A", "B", h);
  ImGui::TextUnformatted("metrics");
  diff_table("##metdiff", side_by_side_numbers(a.data.metrics, b.data.metrics), "A", "B", h);
  ImGui::TextUnformatted("kernel time per op (mean per call x calls)");
  diff_table("##opdiff", op_times(a, b), "A", "B", 0);
}

void View::draw_experiment_sweep() {
  const Sweep& s = *sweep_;
  ImGui::Text("%s: %zu runs", sweep_dir_.c_str(), s.points.size());
  for (const std::string& e : s.errors) ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "%s", e.c_str());
  if (s.parameters.empty()) {
    no_data("the runs' configs do not differ: nothing was swept");
    return;
  }
  std::vector<const char*> names;
  for (const auto& p : s.parameters) names.push_back(p.c_str());
  ImGui::SetNextItemWidth(300);
  ImGui::Combo("swept parameter", &exp_.parameter, names.data(), static_cast<int>(names.size()));
  ImGui::BeginChild("##metrics", ImVec2(260, 0), true);
  for (size_t i = 0; i < s.metrics.size(); ++i) {
    bool on = exp_.metric_on[i];
    if (ImGui::Checkbox(s.metrics[i].c_str(), &on)) exp_.metric_on[i] = on;
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("##plots");
  const float w = ImGui::GetContentRegionAvail().x;
  for (size_t i = 0; i < s.metrics.size(); ++i)
    if (exp_.metric_on[i]) sweep_plot(s, s.parameters[exp_.parameter], s.metrics[i], ImVec2(w, 220));
  ImGui::EndChild();
}

}  // namespace lantern::view
