#include "viz/view.h"

#include <GLFW/glfw3.h>
#include <imgui_internal.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "harness/runfmt/run_dir.h"
#include "viz/ui.h"

namespace lantern::view {

namespace fs = std::filesystem;

namespace {
const char* kNames[kPanels] = {"memory", "lifetimes", "kv", "timeline", "kernels", "experiment"};
const char* kTitles[kPanels] = {"Memory map", "Alias lifetimes", "KV occupancy",
                                "Timeline",   "Kernel statistics", "Experiment"};
}  // namespace

const char* panel_name(Panel p) { return kNames[static_cast<int>(p)]; }
const char* panel_title(Panel p) { return kTitles[static_cast<int>(p)]; }
std::optional<Panel> panel_from_name(const std::string& name) {
  for (int i = 0; i < kPanels; ++i)
    if (name == kNames[i]) return static_cast<Panel>(i);
  return std::nullopt;
}

std::unique_ptr<LoadedRun> load(const fs::path& dir) {
  auto run = std::make_unique<LoadedRun>();
  run->data = load_run(dir);
  auto start = std::chrono::steady_clock::now();
  run->timeline = build_timeline(run->data);
  run->by_op = kernel_stats(run->data, StatsGroup::op);
  run->seq_events = sequence_events(run->data.kv);
  run->derive_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

View::View() = default;

void View::open(const fs::path& dir, int slot) {
  runs_[slot] = load(dir);
  ker_.rows_group = -1;
  kv_.cached_step_bins = 0;
  kv_.tables_step = -2;
  if (slot == 0) {
    const TimelineModel& t = runs_[0]->timeline;
    cursor_ = Cursor{};
    if (!t.steps.empty()) set_step(t.steps.front().step);
    else if (!runs_[0]->data.kv.steps.empty()) cursor_.step = runs_[0]->data.kv.steps.front().step;
    fit_timeline_to_run();
  }
}

void View::open_sweep(const fs::path& dir) {
  sweep_ = load_sweep(dir);
  sweep_dir_ = dir;
  exp_.metric_on.assign(sweep_->metrics.size(), false);
  for (size_t i = 0; i < sweep_->metrics.size(); ++i)
    if (sweep_->metrics[i] == "tokens_per_s" || sweep_->metrics[i] == "ttft_s.p50" ||
        sweep_->metrics[i] == "tpot_s.p50")
      exp_.metric_on[i] = true;
  if (sweep_->points.empty())
    messages_.push_back({LoadMessage::error, dir.string() + ": no run directories inside (a sweep "
                                                            "directory holds one run per sub-directory)"});
}

void View::set_step(int64_t step) {
  cursor_.step = step;
  if (!runs_[0]) return;
  if (const StepSpan* s = runs_[0]->timeline.step(step)) cursor_.t_us = s->t0;
  else
    for (const auto& k : runs_[0]->data.kv.steps)
      if (k.step == step) cursor_.t_us = k.t_us;
}

void View::set_time(double t_us) {
  cursor_.t_us = t_us;
  if (runs_[0] && !runs_[0]->timeline.steps.empty()) cursor_.step = runs_[0]->timeline.step_at(t_us);
}

void View::focus_time(double t0, double t1) {
  const double pad = std::max((t1 - t0) * 0.05, 0.01);
  tl_.t0 = t0 - pad;
  tl_.t1 = t1 + pad;
}

void View::fit_timeline_to_run() {
  if (!runs_[0]) return;
  const TimelineModel& t = runs_[0]->timeline;
  focus_time(t.t_begin, std::max(t.t_end, t.t_begin + 1));
}

void View::fit_timeline_to_step() {
  if (!runs_[0]) return;
  if (const StepSpan* s = runs_[0]->timeline.step(cursor_.step)) focus_time(s->t0, s->end());
}

void View::select_longest_in_step() {
  if (!runs_[0]) return;
  const TimelineModel& t = runs_[0]->timeline;
  const StepSpan* span = t.step(cursor_.step);
  if (!span) return;
  double best = -1;
  // An overlapped step's kernels run until its collection, beside the next
  // step's: kernels count only with the step's own number.
  const runfmt::IndexTable* kernels = runs_[0]->data.index.find("kernels");
  const runfmt::IndexColumn* kstep = kernels ? kernels->find("step") : nullptr;
  for (int pass = 0; pass < 2 && best < 0; ++pass)  // GPU streams first, then host ops
    for (size_t l = 0; l < t.lanes.size(); ++l) {
      const Lane& lane = t.lanes[l];
      if (pass == 0 ? lane.group.rfind("GPU", 0) != 0 : lane.label != "op") continue;
      const double end = pass == 0 ? span->end() : span->t1;
      auto i = std::lower_bound(lane.t0.begin(), lane.t0.end(), span->t0) - lane.t0.begin();
      for (; i < static_cast<long>(lane.size()) && lane.t0[i] < end; ++i) {
        if (pass == 0 && kstep && lane.source[i] == Lane::kernel && kstep->type != runfmt::IndexColumn::f64 &&
            kstep->i[lane.row[i]] != cursor_.step)
          continue;
        if (lane.t1[i] - lane.t0[i] > best) {
          best = lane.t1[i] - lane.t0[i];
          tl_.sel_lane = static_cast<int>(l);
          tl_.sel_item = static_cast<uint32_t>(i);
        }
      }
    }
}

// Finds the op's time in the step: the k-th op range of the step when the
// step's op ranges match the pattern, else the first op of that name and
// layer (graph replays have no op ranges: then its kernels).
void View::locate_op_and_focus(int64_t step, int op_index, const std::string& op, int layer) {
  if (!runs_[0]) return;
  const LoadedRun& r = *runs_[0];
  const StepSpan* span = r.timeline.step(step);
  if (!span) return;
  const runfmt::IndexTable* ranges = r.data.index.find("ranges");
  const int lane_index = r.timeline.lane_index("op");
  if (lane_index >= 0 && ranges) {
    const Lane& lane = r.timeline.lanes[lane_index];
    auto first = std::lower_bound(lane.t0.begin(), lane.t0.end(), span->t0) - lane.t0.begin();
    auto last = std::lower_bound(lane.t0.begin(), lane.t0.end(), span->t1) - lane.t0.begin();
    const runfmt::IndexColumn* layers = ranges->find("layer");
    std::optional<size_t> hit;
    if (op_index >= 0 && first + op_index < last && r.data.str(lane.name[first + op_index]) == op)
      hit = first + op_index;
    for (auto i = first; !hit && i < last; ++i)
      if (r.data.str(lane.name[i]) == op && (!layers || layers->i[lane.row[i]] == layer)) hit = i;
    if (hit) {
      tl_.sel_lane = lane_index;
      tl_.sel_item = static_cast<uint32_t>(*hit);
      focus_time(lane.t0[*hit], lane.t1[*hit]);
      set_time(lane.t0[*hit]);
      shown(Panel::timeline) = true;
      return;
    }
  }
  const runfmt::IndexTable* k = r.data.index.find("kernels");
  if (k && k->find("op") && k->find("step") && k->find("layer") && k->find("start_us")) {
    for (size_t i = 0; i < k->rows; ++i)
      if (k->find("step")->i[i] == step && k->find("layer")->i[i] == layer &&
          r.data.str(k->find("op")->i[i]) == op) {
        const double t = k->find("start_us")->f[i];
        focus_time(t, t + k->find("dur_us")->f[i]);
        set_time(t);
        return;
      }
  }
  focus_time(span->t0, span->t1);
}

void View::no_data(const char* what) {
  ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "%s", what);
}

// ------------------------------------------------------------------ frame

void View::frame() {
  handle_keys();
  draw_menu();
  if (single_) {
    draw_single(*single_);
  } else {
    draw_messages();
    for (int i = 0; i < kPanels; ++i)
      if (show_[i]) panel_window(static_cast<Panel>(i));
  }
  draw_open_dialog();
}

void View::panel_window(Panel p) {
  // First-use layout: a 3 x 2 grid under the menu bar; the ini file keeps
  // whatever the user makes of it.
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  const float top = ImGui::GetFrameHeight() * 2.5f;
  const int i = static_cast<int>(p);
  const ImVec2 cell((vp->WorkSize.x) / 3, (vp->WorkSize.y - top) / 2);
  const int col[kPanels] = {0, 1, 2, 0, 1, 2};
  const int row[kPanels] = {0, 0, 0, 1, 1, 1};
  ImVec2 pos(vp->WorkPos.x + col[i] * cell.x, vp->WorkPos.y + top + row[i] * cell.y);
  ImVec2 size = cell;
  if (p == Panel::timeline) size.x = cell.x * 2;  // the timeline wants width
  if (p == Panel::kernels) pos.x += cell.x, size.x = cell.x;
  if (p == Panel::kernels) pos.x = vp->WorkPos.x + 2 * cell.x;
  if (p == Panel::experiment) { pos = ImVec2(vp->WorkPos.x + 2 * cell.x, vp->WorkPos.y + top); }
  ImGui::SetNextWindowPos(pos, ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowSize(size, ImGuiCond_FirstUseEver);
  if (ImGui::Begin(panel_title(p), &show_[i])) draw_panel(p);
  ImGui::End();
}

void View::draw_single(Panel p) {
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  std::string title = std::string("lantern-view  |  ") + panel_title(p);
  if (runs_[0]) title += "  |  " + runs_[0]->data.name;
  if (cursor_.step >= 0) title += "  |  step " + std::to_string(cursor_.step);
  title += "###single";
  // No window background: the frame's clear colour is the same, and a
  // full-window blended quad costs software GL (llvmpipe) ~half its frame.
  ImGui::Begin(title.c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBackground |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  for (int slot = 0; slot < 2; ++slot)  // load problems stay visible in screenshots too
    if (runs_[slot])
      for (const LoadMessage& m : runs_[slot]->data.messages)
        ImGui::TextColored(m.level == LoadMessage::error     ? ImVec4(1, 0.35f, 0.3f, 1)
                           : m.level == LoadMessage::warning ? ImVec4(1, 0.8f, 0.3f, 1)
                                                             : ImVec4(0.6f, 0.8f, 1, 1),
                           "%s%s", slot ? "B: " : "", m.text.c_str());
  draw_panel(p);
  ImGui::End();
}

void View::draw_panel(Panel p) {
  if (!runs_[0] && !(p == Panel::experiment && sweep_)) {
    no_data("No run open. File > Open, or: lantern-view RUN_DIR [RUN_DIR2]");
    return;
  }
  // A panel that meets data it cannot draw says so instead of taking the app
  // down: the ImGui stack it left open is unwound to this window.
  try {
    switch (p) {
      case Panel::memory: draw_memory(); break;
      case Panel::lifetimes: draw_lifetimes(); break;
      case Panel::kv: draw_kv(); break;
      case Panel::timeline: draw_timeline(); break;
      case Panel::kernels: draw_kernels(); break;
      case Panel::experiment: draw_experiment(); break;
    }
  } catch (const std::exception& e) {
    ImGui::ErrorCheckEndWindowRecover(nullptr);
    ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "%s: cannot draw this run: %s", panel_title(p), e.what());
  }
}

void View::draw_menu() {
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open run...", "Ctrl+O")) dlg_ = OpenDialog{true, 0, false, {}};
    if (ImGui::MenuItem("Open second run (compare)...")) dlg_ = OpenDialog{true, 1, false, {}};
    if (ImGui::MenuItem("Open sweep directory...")) dlg_ = OpenDialog{true, 0, true, {}};
    if (runs_[1] && ImGui::MenuItem("Close second run")) runs_[1].reset();
    ImGui::Separator();
    if (ImGui::MenuItem("Quit", "Ctrl+Q")) glfwSetWindowShouldClose(glfwGetCurrentContext(), 1);
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    for (int i = 0; i < kPanels; ++i) ImGui::MenuItem(kTitles[i], nullptr, &show_[i]);
    ImGui::Separator();
    for (int i = 0; i < kPanels; ++i) {
      std::string label = std::string("Full window: ") + kTitles[i];
      std::string key = std::to_string(i + 1);
      if (ImGui::MenuItem(label.c_str(), key.c_str(), single_ && *single_ == static_cast<Panel>(i)))
        single_ = static_cast<Panel>(i);
    }
    if (ImGui::MenuItem("All panels (tiled)", "0", !single_)) single_.reset();
    ImGui::Separator();
    if (ImGui::MenuItem("Fit timeline to run", "Shift+F")) fit_timeline_to_run();
    if (ImGui::MenuItem("Fit timeline to step", "F")) fit_timeline_to_step();
    ImGui::EndMenu();
  }
  if (runs_[0]) {
    const auto& steps = runs_[0]->timeline.steps;
    ImGui::Separator();
    if (ImGui::ArrowButton("##prev", ImGuiDir_Left)) set_step(std::max<int64_t>(0, cursor_.step - 1));
    ImGui::SameLine();
    int step = static_cast<int>(cursor_.step);
    ImGui::SetNextItemWidth(90);
    if (ImGui::InputInt("##step", &step, 0)) set_step(step);
    ImGui::SameLine();
    if (ImGui::ArrowButton("##next", ImGuiDir_Right)) set_step(cursor_.step + 1);
    const StepSpan* s = runs_[0]->timeline.step(cursor_.step);
    ImGui::Text("step %lld/%zu %s  t = %s", static_cast<long long>(cursor_.step), steps.size(),
                s ? s->phase.c_str() : "", ui::duration(cursor_.t_us).c_str());
    ImGui::Separator();
    ImGui::Text("A: %s", runs_[0]->data.name.c_str());
    if (runs_[1]) ImGui::Text("  B: %s", runs_[1]->data.name.c_str());
  }
  ImGui::EndMainMenuBar();
}

void View::draw_messages() {
  std::vector<std::pair<const char*, const LoadMessage*>> all;
  for (const auto& m : messages_) all.push_back({"", &m});
  for (int slot = 0; slot < 2; ++slot)
    if (runs_[slot])
      for (const auto& m : runs_[slot]->data.messages) all.push_back({slot ? "B: " : "A: ", &m});
  if (all.empty()) return;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->WorkPos.x, vp->WorkPos.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(vp->WorkSize.x, 0), ImGuiCond_Always);
  ImGui::SetNextWindowBgAlpha(0.92f);
  ImGui::Begin("##messages", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoFocusOnAppearing);
  for (auto& [prefix, m] : all) {
    ImVec4 c = m->level == LoadMessage::error     ? ImVec4(1, 0.35f, 0.3f, 1)
               : m->level == LoadMessage::warning ? ImVec4(1, 0.8f, 0.3f, 1)
                                                  : ImVec4(0.6f, 0.8f, 1, 1);
    const char* tag = m->level == LoadMessage::error ? "error" : m->level == LoadMessage::warning ? "warning" : "note";
    ImGui::TextColored(c, "%s%s: %s", prefix, tag, m->text.c_str());
  }
  ImGui::End();
}

void View::draw_open_dialog() {
  if (dlg_.open) {
    ImGui::OpenPopup("Open run directory");
    if (!dlg_.path[0]) std::snprintf(dlg_.path, sizeof dlg_.path, "%s", fs::current_path().c_str());
  }
  ImGui::SetNextWindowSize(ImVec2(640, 420), ImGuiCond_Appearing);
  if (!ImGui::BeginPopupModal("Open run directory", &dlg_.open)) return;
  ImGui::TextUnformatted(dlg_.sweep ? "Sweep directory (one run per sub-directory):"
                                    : dlg_.slot ? "Second run (B, compared with A):" : "Run directory:");
  ImGui::SetNextItemWidth(-80);
  ImGui::InputText("##path", dlg_.path, sizeof dlg_.path);
  ImGui::SameLine();
  fs::path current(dlg_.path);
  const bool is_run = runfmt::RunReader::is_run_dir(current);
  if (ImGui::Button("Open") || (is_run && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Enter)))) {
    if (dlg_.sweep) open_sweep(current);
    else open(current, dlg_.slot);
    dlg_.open = false;
    ImGui::CloseCurrentPopup();
  }
  ImGui::BeginChild("##dirs", ImVec2(0, -ImGui::GetFrameHeightWithSpacing()), true);
  if (ImGui::Selectable("..")) std::snprintf(dlg_.path, sizeof dlg_.path, "%s", current.parent_path().c_str());
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(current, ec))
    if (e.is_directory(ec)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) {
    const bool run = runfmt::RunReader::is_run_dir(d);
    std::string label = d.filename().string() + (run ? "   [run]" : "/");
    if (ImGui::Selectable(label.c_str(), false, ImGuiSelectableFlags_AllowDoubleClick)) {
      std::snprintf(dlg_.path, sizeof dlg_.path, "%s", d.c_str());
      if (run && ImGui::IsMouseDoubleClicked(0) && !dlg_.sweep) {
        open(d, dlg_.slot);
        dlg_.open = false;
        ImGui::CloseCurrentPopup();
      }
    }
  }
  ImGui::EndChild();
  ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "%s", is_run ? "a run directory: Open loads it"
                                                               : "double-click a [run] to open it");
  ImGui::EndPopup();
}

void View::handle_keys() {
  ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_O, false)) dlg_ = OpenDialog{true, 0, false, {}};
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_Q, false))
    glfwSetWindowShouldClose(glfwGetCurrentContext(), 1);
  if (io.WantTextInput) return;
  for (int i = 0; i <= kPanels; ++i)  // 1..6: one panel full-window; 0: all, tiled
    if (!io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_0 + i, false)) {
      if (i == 0) single_.reset();
      else single_ = static_cast<Panel>(i - 1);
    }
  if (!runs_[0]) return;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow))) set_step(std::max<int64_t>(0, cursor_.step - 1));
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) set_step(cursor_.step + 1);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home)) && !runs_[0]->timeline.steps.empty())
    set_step(runs_[0]->timeline.steps.front().step);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End)) && !runs_[0]->timeline.steps.empty())
    set_step(runs_[0]->timeline.steps.back().step);
  if (ImGui::IsKeyPressed(GLFW_KEY_F, false)) io.KeyShift ? fit_timeline_to_run() : fit_timeline_to_step();
}

// ------------------------------------------------------------------ ini file

void View::register_settings() {
  ImGuiSettingsHandler h;
  h.TypeName = "LanternView";
  h.TypeHash = ImHashStr("LanternView");
  h.UserData = this;
  h.ReadOpenFn = [](ImGuiContext*, ImGuiSettingsHandler* handler, const char*) -> void* {
    return handler->UserData;
  };
  h.ReadLineFn = [](ImGuiContext*, ImGuiSettingsHandler*, void* entry, const char* line) {
    View* v = static_cast<View*>(entry);
    char name[64];
    int on = 0;
    if (std::sscanf(line, "%63[^=]=%d", name, &on) == 2)
      if (auto p = panel_from_name(name)) v->show_[static_cast<int>(*p)] = on != 0;
  };
  h.WriteAllFn = [](ImGuiContext*, ImGuiSettingsHandler* handler, ImGuiTextBuffer* out) {
    View* v = static_cast<View*>(handler->UserData);
    out->appendf("[%s][Panels]\n", handler->TypeName);
    for (int i = 0; i < kPanels; ++i) out->appendf("%s=%d\n", kNames[i], v->show_[i] ? 1 : 0);
    out->append("\n");
  };
  ImGui::GetCurrentContext()->SettingsHandlers.push_back(h);
}

}  // namespace lantern::view
