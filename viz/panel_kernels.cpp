// Kernel statistics panel: per op, per family.variant or per kernel name:
// count, total, mean, p50, p99, GB/s, TFLOP/s, % of roofline, share of step
// time and wall time (each kernel's end past the latest end before it in its
// step: what removing the work would save where launches overlap); sortable
// columns and a filter box (viz/model/kernel_stats.h).
#include <cmath>

#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {
const char* kGroups[] = {"per op", "per family.variant", "per kernel"};
const char* kPhases[] = {"all phases", "prefill", "decode", "mixed"};
const StatsColumn kColumns[] = {StatsColumn::key,   StatsColumn::key,      StatsColumn::count,
                                StatsColumn::total, StatsColumn::mean,     StatsColumn::p50,
                                StatsColumn::p99,   StatsColumn::gb_per_s, StatsColumn::tflop_per_s,
                                StatsColumn::pct_roofline, StatsColumn::share, StatsColumn::wall};
}  // namespace

void View::jump_to_group(const std::string& key) {
  const RunData& d = runs_[0]->data;
  const runfmt::IndexTable* k = d.index.find("kernels");
  const runfmt::IndexColumn* col = k ? k->find(ker_.group == 0 ? "op" : ker_.group == 1 ? "family" : "kernel") : nullptr;
  const runfmt::IndexColumn *variant = k ? k->find("variant_name") : nullptr, *step = k ? k->find("step") : nullptr;
  const runfmt::IndexColumn *start = k ? k->find("start_us") : nullptr, *dur = k ? k->find("dur_us") : nullptr;
  if (!col || !step || !start || !dur) return;
  std::optional<size_t> first;
  for (size_t r = 0; r < k->rows; ++r) {
    std::string name = d.str(col->i[r]);
    if (ker_.group == 1 && variant && !d.str(variant->i[r]).empty()) name += "." + d.str(variant->i[r]);
    if (name != key) continue;
    if (!first) first = r;
    if (step->i[r] >= cursor_.step) {
      first = r;
      break;
    }
  }
  if (!first) return;
  focus_time(start->f[*first], start->f[*first] + dur->f[*first]);
  set_time(start->f[*first]);
}

namespace {

void setup_kernel_columns(int group) {
  ImGui::TableSetupScrollFreeze(1, 1);
  const std::string us = std::string(ui::micro()) + "s";
  ImGui::TableSetupColumn(kGroups[group] + 4, ImGuiTableColumnFlags_WidthStretch, 0, 0);
  ImGui::TableSetupColumn("family.variant", 0, 0, 1);
  ImGui::TableSetupColumn("count", ImGuiTableColumnFlags_PreferSortDescending, 0, 2);
  ImGui::TableSetupColumn("total ms", ImGuiTableColumnFlags_DefaultSort | ImGuiTableColumnFlags_PreferSortDescending, 0, 3);
  ImGui::TableSetupColumn(("mean " + us).c_str(), ImGuiTableColumnFlags_PreferSortDescending, 0, 4);
  ImGui::TableSetupColumn(("p50 " + us).c_str(), ImGuiTableColumnFlags_PreferSortDescending, 0, 5);
  ImGui::TableSetupColumn(("p99 " + us).c_str(), ImGuiTableColumnFlags_PreferSortDescending, 0, 6);
  ImGui::TableSetupColumn("GB/s", ImGuiTableColumnFlags_PreferSortDescending, 0, 7);
  ImGui::TableSetupColumn("TFLOP/s", ImGuiTableColumnFlags_PreferSortDescending, 0, 8);
  ImGui::TableSetupColumn("% roofline", ImGuiTableColumnFlags_PreferSortDescending, 0, 9);
  ImGui::TableSetupColumn("% of step", ImGuiTableColumnFlags_PreferSortDescending, 0, 10);
  ImGui::TableSetupColumn("wall ms", ImGuiTableColumnFlags_PreferSortDescending, 0, 11);
  ImGui::TableHeadersRow();
}

void cell(const std::string& s) {
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(s.c_str());
}

void number_cell(double v, const char* fmt) {
  if (std::isnan(v)) return cell("-");
  char buf[64];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 1e4 ? "%.0f" : fmt, v);  // no 1.474e+05
  cell(buf);
}

// One table row; true when it was clicked.
bool kernel_row(const KernelStat& s, int i) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::PushID(i);
  const bool clicked =
      ImGui::Selectable("##row", false, ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap);
  ImGui::PopID();
  ImGui::SameLine(0, 0);
  ui::legend_chip(ui::color_for_name(s.key), s.key);
  cell(s.family_variant);
  cell(std::to_string(s.count));
  number_cell(s.total_us / 1e3, "%.3f");
  number_cell(s.mean_us, "%.4g");
  number_cell(s.p50_us, "%.4g");
  number_cell(s.p99_us, "%.4g");
  number_cell(s.gb_per_s, "%.4g");
  number_cell(s.tflop_per_s, "%.3g");
  number_cell(s.pct_roofline, "%.3g");
  number_cell(s.share_of_steps * 100, "%.1f");
  number_cell(s.wall_us / 1e3, "%.3f");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%.1f%% of the kernels' wall time: each kernel's end past the latest end before it in its "
                      "step, so overlapping (PDL) launches are charged once",
                      100 * s.wall_share);
  return clicked;
}

}  // namespace

// Grouping, phase and filter; the rows are recomputed when the first two change.
void View::kernel_toolbar() {
  const LoadedRun& run = *runs_[0];
  ImGui::SetNextItemWidth(170);
  ImGui::Combo("##group", &ker_.group, kGroups, 3);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  ImGui::Combo("##phase", &ker_.phase, kPhases, 4);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(200);
  ImGui::InputTextWithHint("##filter", "filter (op, kernel, family)", ker_.filter, sizeof ker_.filter);
  if (ker_.rows_group != ker_.group || ker_.rows_phase != ker_.phase) {
    const StatsGroup by = ker_.group == 0 ? StatsGroup::op : ker_.group == 1 ? StatsGroup::family_variant
                                                                             : StatsGroup::kernel;
    ker_.rows = (by == StatsGroup::op && ker_.phase == 0)
                    ? run.by_op
                    : kernel_stats(run.data, by, ker_.phase ? kPhases[ker_.phase] : "");
    ker_.rows_group = ker_.group;
    ker_.rows_phase = ker_.phase;
    ker_.resort = true;
  }
}

void View::draw_kernels() {
  const LoadedRun& run = *runs_[0];
  const runfmt::IndexTable* k = run.data.index.find("kernels");
  if (!k || k->rows == 0) {
    no_data("No kernel rows (kernels.csv is empty: CUPTI off, or the harness timeline off)");
    return;
  }
  kernel_toolbar();
  const std::string source = json_text(run.data.manifest.json, {"harness", "kernel_timing"});
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(0.65f, 0.65f, 0.65f, 1), "%zu rows, timing: %s", k->rows,
                     source == "host" ? "host clock (CPU backend)" : source.c_str());

  const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollX;
  if (!ImGui::BeginTable("##kernels", 12, flags)) return;
  setup_kernel_columns(ker_.group);
  if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs())
    if ((specs->SpecsDirty || ker_.resort) && specs->SpecsCount > 0) {
      const auto& s = specs->Specs[0];
      sort_stats(ker_.rows, kColumns[s.ColumnUserID], s.SortDirection == ImGuiSortDirection_Ascending);
      specs->SpecsDirty = false;
      ker_.resort = false;
    }
  const std::vector<size_t> shown = filter_stats(ker_.rows, ker_.filter);
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(shown.size()));
  while (clipper.Step())
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i)
      // Click: the timeline (and so every panel) goes to this group's first
      // kernel at or after the cursor step.
      if (kernel_row(ker_.rows[shown[i]], i)) jump_to_group(ker_.rows[shown[i]].key);
  ImGui::EndTable();
}

}  // namespace lantern::view
