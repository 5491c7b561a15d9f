// Experiment panel, "Edit as new experiment": a combo of the valid variants
// per kernel family (a text field for runs older than run format 1.3), every
// limit with its range checked inline, name and description, and "Save as"
// that validates as `lantern run` does and writes the file. The logic lives
// in viz/model/experiment_edit (tested without a window); this only draws.
#include <cstdio>
#include <cstring>

#include "viz/model/experiment_edit.h"
#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

const ImVec4 kError(1, 0.35f, 0.3f, 1), kOk(0.5f, 0.9f, 0.5f, 1), kDim(0.65f, 0.65f, 0.65f, 1);

template <size_t N>
void copy_to(char (&buf)[N], const std::string& s) {
  std::snprintf(buf, N, "%s", s.c_str());
}

// The combo's items: "default" (what ran), then every variant "name (N)";
// returns the index `current` (a name or number) selects, adding it as an
// item when it is not valid here.
int variant_items(const std::vector<VariantOption>& options, const std::string& ran,
                  const std::string& current, std::vector<std::string>* items) {
  items->push_back("default (ran " + ran + ")");
  int selected = current.empty() ? 0 : -1;
  for (const VariantOption& v : options) {
    if (current == v.name || current == std::to_string(v.number))
      selected = static_cast<int>(items->size());
    items->push_back(v.name + " (" + std::to_string(v.number) + ")");
  }
  if (selected < 0) {
    selected = static_cast<int>(items->size());
    items->push_back(current + " (not valid on this backend)");
  }
  return selected;
}

void variant_combo(const std::string& family, const std::vector<VariantOption>& options,
                   const std::string& ran, std::string* current) {
  std::vector<std::string> items;
  int selected = variant_items(options, ran, *current, &items);
  ImGui::SetNextItemWidth(-1);
  if (!ImGui::BeginCombo(("##k" + family).c_str(), items[selected].c_str())) return;
  for (size_t i = 0; i < items.size(); ++i)
    if (ImGui::Selectable(items[i].c_str(), static_cast<int>(i) == selected))
      *current = i == 0 ? std::string() : i <= options.size() ? options[i - 1].name : *current;
  ImGui::EndCombo();
}

}  // namespace

void View::reset_experiment_edit() {
  ExperimentEditState& s = exp_.edit;
  s = ExperimentEditState{};
  s.run_dir = runs_[0]->data.dir;
  s.source = editable_experiment(runs_[0]->data.manifest.json, &s.unavailable);
  if (!s.source) return;
  s.edits = initial_edits(*s.source);
  copy_to(s.name, s.edits.name);
  copy_to(s.description, s.edits.description);
  copy_to(s.path, default_save_path(*s.source).string());
  for (const auto& [family, _] : s.source->ran)
    copy_to(s.variant_text[family].text, s.edits.kernels[family]);
}

// One row per family: the family, what ran, the new choice.
void View::draw_edit_kernels() {
  ExperimentEditState& s = exp_.edit;
  const EditableExperiment& x = *s.source;
  if (!x.has_variant_list())
    ImGui::TextColored(
        kDim,
        "run format < 1.3: no variant list recorded; type a name or number (not checked here)");
  if (!ImGui::BeginTable("##kernels", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp))
    return;
  ImGui::TableSetupColumn("kernel family", ImGuiTableColumnFlags_WidthStretch, 1);
  ImGui::TableSetupColumn("variant", ImGuiTableColumnFlags_WidthStretch, 1.4f);
  ImGui::TableHeadersRow();
  for (const auto& [family, ran] : x.ran) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(family.c_str());
    ImGui::TableNextColumn();
    std::string& current = s.edits.kernels[family];
    if (auto it = x.variants.find(family); it != x.variants.end()) {
      variant_combo(family, it->second, ran, &current);
    } else {
      char* text = s.variant_text[family].text;
      ImGui::SetNextItemWidth(-1);
      if (ImGui::InputTextWithHint(("##t" + family).c_str(), ("default (ran " + ran + ")").c_str(),
                                   text, 64))
        current = text;
    }
  }
  ImGui::EndTable();
}

// One row per limit: the value and, inline, its range or what is wrong with it.
void View::draw_edit_limits() {
  ExperimentEditState& s = exp_.edit;
  if (!ImGui::BeginTable("##limits", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp))
    return;
  ImGui::TableSetupColumn("limit", ImGuiTableColumnFlags_WidthStretch, 1);
  ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch, 1);
  ImGui::TableSetupColumn("range", ImGuiTableColumnFlags_WidthStretch, 1.1f);
  ImGui::TableHeadersRow();
  for (const LimitSpec& spec : limit_specs()) {
    double& value = s.edits.limits[spec.key];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(spec.key.c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", spec.doc.c_str());
    ImGui::TableNextColumn();
    ImGui::SetNextItemWidth(-1);
    if (spec.integer) {
      int64_t v = static_cast<int64_t>(value);
      if (ImGui::InputScalar(("##l" + spec.key).c_str(), ImGuiDataType_S64, &v))
        value = static_cast<double>(v);
    } else {
      ImGui::InputDouble(("##l" + spec.key).c_str(), &value, 0, 0, "%.4g");
    }
    ImGui::TableNextColumn();
    const std::string problem = limit_problem(spec, value);
    if (!problem.empty())
      ImGui::TextColored(kError, "%s", problem.c_str());
    else
      ImGui::TextColored(kDim, "%s", limit_range(spec).c_str());
  }
  ImGui::EndTable();
}

// Name, description, the path, Save as... and what came of the last save.
void View::draw_edit_save() {
  ExperimentEditState& s = exp_.edit;
  ImGui::SetNextItemWidth(-90);
  ImGui::InputText("name", s.name, sizeof s.name);
  ImGui::SetNextItemWidth(-90);
  ImGui::InputText("description", s.description, sizeof s.description);
  ImGui::SetNextItemWidth(-90);
  ImGui::InputText("##path", s.path, sizeof s.path);
  ImGui::SameLine();
  if (ImGui::Button("Save as...")) {
    s.edits.name = s.name;
    s.edits.description = s.description;
    s.saved = save_edited_experiment(*s.source, s.edits, s.path, s.overwrite);
  }
  ImGui::Checkbox("overwrite an existing file", &s.overwrite);
  if (!s.saved) {
    ImGui::TextColored(kDim, "checked as `lantern run FILE` checks it; then: lantern run FILE");
    return;
  }
  ImGui::PushTextWrapPos(0);
  ImGui::TextColored(s.saved->ok ? kOk : kError, "%s", s.saved->message().c_str());
  ImGui::PopTextWrapPos();
  if (!s.saved->ok && s.saved->problems.size() > 1 && ImGui::IsItemHovered()) {
    std::string all;
    for (const std::string& p : s.saved->problems) all += p + "\n";
    ImGui::SetTooltip("%s", all.c_str());
  }
}

void View::draw_experiment_edit() {
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "Edit as new experiment");
  if (!exp_.edit.source) {
    no_data(exp_.edit.unavailable.c_str());
    return;
  }
  ImGui::SameLine();
  ImGui::TextColored(kDim, "(from %s, %s backend)",
                     exp_.edit.source->resolved.value("name", "").c_str(),
                     exp_.edit.source->backend.c_str());
  draw_edit_save();
  draw_edit_limits();
  draw_edit_kernels();
}

}  // namespace lantern::view
