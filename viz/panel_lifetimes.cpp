// Alias lifetimes panel: a Gantt per arena buffer (one row per view) of the
// live intervals over the ops of the cursor step's access pattern; overlaps
// of views sharing a buffer, violations and stale reads highlighted; a strip
// of every step's pattern; click a bar to jump the timeline to its op.
#include <algorithm>
#include <optional>

#include "kernels/base/errors.h"
#include "viz/model/lifetimes.h"
#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

constexpr float kLabelW = 170, kRowH = 17;

void pattern_header(const runfmt::MemoryMap& mem, int64_t step, int pattern, const Gantt& g) {
  int steps_sharing = 0;
  for (const auto& [s, p] : mem.step_patterns) steps_sharing += p == pattern;
  ImGui::Text("step %lld: pattern %d (%d ops, shared by %d steps)   violations %lld, stale-read warnings %lld, "
              "overlapping view pairs here %d",
              static_cast<long long>(step), pattern, g.ops, steps_sharing,
              static_cast<long long>(mem.violation_count), static_cast<long long>(mem.warning_count),
              g.overlapping_pairs);
}

// Over steps: one cell per step coloured by its pattern; returns the step
// clicked.
std::optional<int64_t> pattern_strip(const runfmt::MemoryMap& mem, int64_t cursor_step, float width) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = 14, w = width - kLabelW;
  ImGui::Dummy(ImVec2(width, h + 4));
  dl->AddText(ImVec2(p.x, p.y - 1), ui::kDimText, "pattern per step");
  const double per = static_cast<double>(mem.step_patterns.size()) / w;
  for (size_t i = 0; i < mem.step_patterns.size(); ++i) {
    const float x = p.x + kLabelW + static_cast<float>(i / per);
    const float x2 = std::max(x + 1, p.x + kLabelW + static_cast<float>((i + 1) / per));
    dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x2, p.y + h), ui::color_for(mem.step_patterns[i].second * 7919 + 3));
    if (mem.step_patterns[i].first == cursor_step)
      dl->AddRect(ImVec2(x - 1, p.y - 1), ImVec2(x2 + 1, p.y + h + 1), ui::kCursor, 0, 0, 2);
  }
  if (ImGui::IsWindowHovered() && io.MousePos.y >= p.y && io.MousePos.y < p.y + h && io.MousePos.x >= p.x + kLabelW) {
    const size_t i = std::min(mem.step_patterns.size() - 1, static_cast<size_t>((io.MousePos.x - p.x - kLabelW) * per));
    ImGui::SetTooltip("step %lld: pattern %d", static_cast<long long>(mem.step_patterns[i].first),
                      mem.step_patterns[i].second);
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) return mem.step_patterns[i].first;
  }
  return std::nullopt;
}

// The Gantt's geometry: header, columns, rows with a gap between buffers.
struct GanttFrame {
  ImVec2 p;
  float font, header_h, gx0, gw, col_w, h;
};

float gantt_height(const Gantt& g, float header_h) {
  float h = header_h + kRowH * g.rows.size() + 8;
  int last_buffer = -2;
  for (const GanttRow& r : g.rows) h += (r.buffer != last_buffer) ? 4 : 0, last_buffer = r.buffer;
  return h;
}

// Op columns: layer bands and labels where they fit, then the op names
// staggered on two lines so each gets two columns of room.
void gantt_columns(ImDrawList* dl, const runfmt::AccessPattern& pat, const Gantt& g, const GanttFrame& f) {
  for (int o = 0; o < g.ops; ++o) {
    const float x = f.gx0 + o * f.col_w;
    if (pat.ops[o].layer % 2 == 1)
      dl->AddRectFilled(ImVec2(x, f.p.y + f.header_h), ImVec2(x + f.col_w, f.p.y + f.h), IM_COL32(255, 255, 255, 10));
    const bool layer_start = o == 0 || pat.ops[o].layer != pat.ops[o - 1].layer;
    if (layer_start) {
      dl->AddLine(ImVec2(x, f.p.y + f.header_h - 4), ImVec2(x, f.p.y + f.h), ui::kGridLine);
      std::string label = pat.ops[o].op;
      if (pat.ops[o].layer >= 0) label = strformat("L%d", pat.ops[o].layer);
      dl->AddText(ImVec2(x + 2, f.p.y), ui::kDimText, label.c_str());
    }
  }
  dl->AddText(ImVec2(f.p.x, f.p.y), ui::kDimText, "view (buffer)  \\  op ->");
  for (int o = 0; o < g.ops; ++o) {
    const float x = f.gx0 + o * f.col_w, ty = f.p.y + 18 + (o % 2) * f.font;
    ui::clipped_text(dl, ImVec2(x - f.col_w / 2, ty), ImVec2(x + f.col_w * 1.5f, ty + f.font), pat.ops[o].op,
                     o % 2 ? ui::kDimText : IM_COL32(200, 200, 200, 255));
  }
}

void bar_tooltip(const runfmt::MemoryMap& mem, const runfmt::AccessPattern& pat, const GanttRow& r,
                 const GanttBar& b) {
  ImGui::BeginTooltip();
  const runfmt::ViewRecord& v = mem.views[r.view];
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", r.label.c_str());
  auto op_name = [&](int i) {
    return pat.ops[i].layer >= 0 ? strformat("%s L%d (#%d)", pat.ops[i].op.c_str(), pat.ops[i].layer, i)
                                 : strformat("%s (#%d)", pat.ops[i].op.c_str(), i);
  };
  ui::kv_line("written by", b.stale ? "nothing in this step (stale read)" : op_name(b.first));
  ui::kv_line("last read by", b.unread ? "never read" : op_name(b.last));
  ui::kv_line("size", ui::bytes(static_cast<double>(v.bytes)));
  if (b.overlaps) ImGui::TextColored(ImVec4(1, 0.65f, 0.2f, 1), "overlaps a live view of the same buffer");
  if (b.violation) ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "named by an alias violation / warning");
  ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "click: timeline to this op");
  ImGui::EndTooltip();
}

// One bar with its marks; true while the mouse is over it.
bool gantt_bar(ImDrawList* dl, const runfmt::MemoryMap& mem, const GanttRow& r, const GanttBar& b,
               const GanttFrame& f, float y) {
  ImGuiIO& io = ImGui::GetIO();
  ImVec2 a(f.gx0 + b.first * f.col_w + 1, y + 2), c(f.gx0 + (b.last + 1) * f.col_w - 1, y + kRowH - 2);
  ImU32 fill = ui::color_for_name(mem.views[r.view].name, b.unread ? 0.35f : 0.9f);
  dl->AddRectFilled(a, c, fill, 2);
  dl->AddRect(a, c, ui::darker(fill, 0.5f), 2);  // consecutive values of one view stay apart
  if (b.stale) dl->AddRect(a, c, ui::kYellow, 2, 0, 2);
  if (b.overlaps) dl->AddRect(a, c, ui::kOrange, 2, 0, 2);
  if (b.violation) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(c.x + 1, c.y + 1), ui::kRed, 2, 0, 2.5f);
  return ImGui::IsWindowHovered() && io.MousePos.x >= a.x && io.MousePos.x < c.x && io.MousePos.y >= a.y &&
         io.MousePos.y < c.y;
}

// Every view's row of bars; returns the bar clicked (its first op).
std::optional<int> gantt_rows(ImDrawList* dl, const runfmt::MemoryMap& mem, const runfmt::AccessPattern* pat,
                              const Gantt& g, const GanttFrame& f) {
  std::optional<int> clicked;
  float y = f.p.y + f.header_h;
  int last_buffer = -2;
  for (const GanttRow& r : g.rows) {
    if (r.buffer != last_buffer) {
      dl->AddLine(ImVec2(f.p.x, y + 1), ImVec2(f.gx0 + f.gw, y + 1), IM_COL32(255, 255, 255, 50));
      y += 4;
      last_buffer = r.buffer;
    }
    const bool any_issue = std::any_of(r.bars.begin(), r.bars.end(), [](const GanttBar& b) { return b.violation; });
    dl->AddText(ImVec2(f.p.x + 4, y), any_issue ? ui::kRed : ui::kText, r.label.c_str());
    for (const GanttBar& b : r.bars)
      if (gantt_bar(dl, mem, r, b, f, y) && pat) {
        bar_tooltip(mem, *pat, r, b);
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) clicked = b.first;
      }
    y += kRowH;
  }
  return clicked;
}

void lifetime_legend(const runfmt::MemoryMap& mem) {
  ui::legend_chip(ui::kOrange, "overlap within a buffer");
  ImGui::SameLine(0, 16);
  ui::legend_chip(ui::kRed, "violation");
  ImGui::SameLine(0, 16);
  ui::legend_chip(ui::kYellow, "stale read");
  ImGui::SameLine(0, 16);
  ui::legend_chip(ui::with_alpha(ui::kGrey, 0.4f), "written, never read");
  for (const auto* list : {&mem.violations, &mem.warnings})
    for (const runfmt::AliasIssue& i : *list)
      ImGui::TextColored(i.kind == "clobber" ? ImVec4(1, 0.35f, 0.3f, 1) : ImVec4(1, 0.85f, 0.3f, 1), "%s x%lld: %s",
                         i.kind.c_str(), static_cast<long long>(i.occurrences), i.message.c_str());
  if (mem.violations.empty() && mem.warnings.empty())
    ImGui::TextColored(ImVec4(0.4f, 0.85f, 0.45f, 1), "no alias violations or stale reads in this run");
}

}  // namespace

// The Gantt of one pattern in a scrolling child; a click jumps the timeline.
void View::draw_gantt(const runfmt::MemoryMap& mem, int pattern, const Gantt& g, float width) {
  const runfmt::AccessPattern* pat = nullptr;
  for (const auto& p : mem.patterns)
    if (p.id == pattern) pat = &p;
  GanttFrame f;
  f.p = ImGui::GetCursorScreenPos();
  f.font = ImGui::GetFontSize();
  f.header_h = 18 + 2 * f.font + 4;
  f.gx0 = f.p.x + kLabelW;
  f.gw = std::max(10.f, width - kLabelW - 4);
  f.col_w = f.gw / std::max(1, g.ops);
  f.h = gantt_height(g, f.header_h);
  ImGui::BeginChild("##gantt", ImVec2(0, -ImGui::GetTextLineHeightWithSpacing() * 4), false,
                    ImGuiWindowFlags_NoScrollWithMouse * 0);
  f.p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(width - 10, f.h));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (pat) gantt_columns(dl, *pat, g, f);
  else dl->AddText(ImVec2(f.p.x, f.p.y), ui::kDimText, "view (buffer)  \\  op ->");
  if (std::optional<int> op = gantt_rows(dl, mem, pat, g, f))
    locate_op_and_focus(cursor_.step, *op, pat->ops[*op].op, pat->ops[*op].layer);
  ImGui::EndChild();
}

void View::draw_lifetimes() {
  const LoadedRun& run = *runs_[0];
  const runfmt::MemoryMap& mem = run.data.memory;
  if (mem.patterns.empty()) {
    no_data("No access patterns (memory.json has none: harness alias tracking off, or no step ran)");
    return;
  }
  int pattern = pattern_of_step(mem, cursor_.step);
  if (pattern < 0) pattern = mem.patterns.front().id;
  const Gantt g = build_gantt(mem, pattern);
  pattern_header(mem, cursor_.step, pattern, g);
  const float width = ImGui::GetContentRegionAvail().x;
  if (!mem.step_patterns.empty())
    if (std::optional<int64_t> step = pattern_strip(mem, cursor_.step, width)) set_step(*step);
  draw_gantt(mem, pattern, g, width);
  lifetime_legend(mem);
}

}  // namespace lantern::view
