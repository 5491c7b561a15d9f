// Alias lifetimes panel: a Gantt per arena buffer (one row per view) of the
// live intervals over the ops of the cursor step's access pattern; overlaps
// of views sharing a buffer, violations and stale reads highlighted; a strip
// of every step's pattern; click a bar to jump the timeline to its op.
#include <algorithm>

#include "kernels/base/errors.h"
#include "viz/model/lifetimes.h"
#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

void View::draw_lifetimes() {
  const LoadedRun& run = *runs_[0];
  const runfmt::MemoryMap& mem = run.data.memory;
  if (mem.patterns.empty()) {
    no_data("No access patterns (memory.json has none: harness alias tracking off, or no step ran)");
    return;
  }
  int pattern = pattern_of_step(mem, cursor_.step);
  if (pattern < 0) pattern = mem.patterns.front().id;
  Gantt g = build_gantt(mem, pattern);
  const runfmt::AccessPattern* pat = nullptr;
  for (const auto& p : mem.patterns)
    if (p.id == pattern) pat = &p;
  int steps_sharing = 0;
  for (const auto& [s, p] : mem.step_patterns) steps_sharing += p == pattern;
  ImGui::Text("step %lld: pattern %d (%d ops, shared by %d steps)   violations %lld, stale-read warnings %lld, "
              "overlapping view pairs here %d",
              static_cast<long long>(cursor_.step), pattern, g.ops, steps_sharing,
              static_cast<long long>(mem.violation_count), static_cast<long long>(mem.warning_count),
              g.overlapping_pairs);

  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  const float width = ImGui::GetContentRegionAvail().x;
  const float label_w = 170;
  // Over steps: one cell per step coloured by its pattern; click to move the cursor.
  if (!mem.step_patterns.empty()) {
    ImVec2 p = ImGui::GetCursorScreenPos();
    const float h = 14, w = width - label_w;
    ImGui::Dummy(ImVec2(width, h + 4));
    dl->AddText(ImVec2(p.x, p.y - 1), ui::kDimText, "pattern per step");
    const double per = static_cast<double>(mem.step_patterns.size()) / w;
    for (size_t i = 0; i < mem.step_patterns.size(); ++i) {
      const float x = p.x + label_w + static_cast<float>(i / per);
      const float x2 = std::max(x + 1, p.x + label_w + static_cast<float>((i + 1) / per));
      dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x2, p.y + h), ui::color_for(mem.step_patterns[i].second * 7919 + 3));
      if (mem.step_patterns[i].first == cursor_.step)
        dl->AddRect(ImVec2(x - 1, p.y - 1), ImVec2(x2 + 1, p.y + h + 1), ui::kCursor, 0, 0, 2);
    }
    if (ImGui::IsWindowHovered() && io.MousePos.y >= p.y && io.MousePos.y < p.y + h && io.MousePos.x >= p.x + label_w) {
      const size_t i = std::min(mem.step_patterns.size() - 1, static_cast<size_t>((io.MousePos.x - p.x - label_w) * per));
      ImGui::SetTooltip("step %lld: pattern %d", static_cast<long long>(mem.step_patterns[i].first),
                        mem.step_patterns[i].second);
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) set_step(mem.step_patterns[i].first);
    }
  }

  // The Gantt.
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float font = ImGui::GetFontSize(), header_h = 18 + 2 * font + 4, row_h = 17;
  const float gx0 = p.x + label_w, gw = std::max(10.f, width - label_w - 4);
  const float col_w = gw / std::max(1, g.ops);
  float h = header_h + row_h * g.rows.size() + 8;
  int last_buffer = -2;
  for (const GanttRow& r : g.rows) h += (r.buffer != last_buffer) ? 4 : 0, last_buffer = r.buffer;
  ImGui::BeginChild("##gantt", ImVec2(0, -ImGui::GetTextLineHeightWithSpacing() * 4), false,
                    ImGuiWindowFlags_NoScrollWithMouse * 0);
  p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(width - 10, h));
  dl = ImGui::GetWindowDrawList();
  // Op columns: layer bands and labels where they fit.
  for (int o = 0; o < g.ops && pat; ++o) {
    const float x = gx0 + o * col_w;
    if (pat->ops[o].layer % 2 == 1)
      dl->AddRectFilled(ImVec2(x, p.y + header_h), ImVec2(x + col_w, p.y + h), IM_COL32(255, 255, 255, 10));
    const bool layer_start = o == 0 || pat->ops[o].layer != pat->ops[o - 1].layer;
    if (layer_start) {
      dl->AddLine(ImVec2(x, p.y + header_h - 4), ImVec2(x, p.y + h), ui::kGridLine);
      std::string label = pat->ops[o].op;
      if (pat->ops[o].layer >= 0) label = strformat("L%d", pat->ops[o].layer);
      dl->AddText(ImVec2(x + 2, p.y), ui::kDimText, label.c_str());
    }
  }
  dl->AddText(ImVec2(p.x, p.y), ui::kDimText, "view (buffer)  \\  op ->");
  // Op names, staggered on two lines so each gets two columns of room.
  for (int o = 0; o < g.ops && pat; ++o) {
    const float x = gx0 + o * col_w, ty = p.y + 18 + (o % 2) * font;
    ui::clipped_text(dl, ImVec2(x - col_w / 2, ty), ImVec2(x + col_w * 1.5f, ty + font), pat->ops[o].op,
                     o % 2 ? ui::kDimText : IM_COL32(200, 200, 200, 255));
  }
  float y = p.y + header_h;
  last_buffer = -2;
  for (const GanttRow& r : g.rows) {
    if (r.buffer != last_buffer) {
      dl->AddLine(ImVec2(p.x, y + 1), ImVec2(gx0 + gw, y + 1), IM_COL32(255, 255, 255, 50));
      y += 4;
      last_buffer = r.buffer;
    }
    const bool any_issue = std::any_of(r.bars.begin(), r.bars.end(), [](const GanttBar& b) { return b.violation; });
    dl->AddText(ImVec2(p.x + 4, y), any_issue ? ui::kRed : ui::kText, r.label.c_str());
    for (const GanttBar& b : r.bars) {
      ImVec2 a(gx0 + b.first * col_w + 1, y + 2), c(gx0 + (b.last + 1) * col_w - 1, y + row_h - 2);
      ImU32 fill = ui::color_for_name(mem.views[r.view].name, b.unread ? 0.35f : 0.9f);
      dl->AddRectFilled(a, c, fill, 2);
      dl->AddRect(a, c, ui::darker(fill, 0.5f), 2);  // consecutive values of one view stay apart
      if (b.stale) dl->AddRect(a, c, ui::kYellow, 2, 0, 2);
      if (b.overlaps) dl->AddRect(a, c, ui::kOrange, 2, 0, 2);
      if (b.violation) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(c.x + 1, c.y + 1), ui::kRed, 2, 0, 2.5f);
      if (ImGui::IsWindowHovered() && io.MousePos.x >= a.x && io.MousePos.x < c.x && io.MousePos.y >= a.y &&
          io.MousePos.y < c.y && pat) {
        ImGui::BeginTooltip();
        const runfmt::ViewRecord& v = mem.views[r.view];
        ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", r.label.c_str());
        auto op_name = [&](int i) {
          return pat->ops[i].layer >= 0 ? strformat("%s L%d (#%d)", pat->ops[i].op.c_str(), pat->ops[i].layer, i)
                                        : strformat("%s (#%d)", pat->ops[i].op.c_str(), i);
        };
        ui::kv_line("written by", b.stale ? "nothing in this step (stale read)" : op_name(b.first));
        ui::kv_line("last read by", b.unread ? "never read" : op_name(b.last));
        ui::kv_line("size", ui::bytes(static_cast<double>(v.bytes)));
        if (b.overlaps) ImGui::TextColored(ImVec4(1, 0.65f, 0.2f, 1), "overlaps a live view of the same buffer");
        if (b.violation) ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "named by an alias violation / warning");
        ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "click: timeline to this op");
        ImGui::EndTooltip();
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left))
          locate_op_and_focus(cursor_.step, b.first, pat->ops[b.first].op, pat->ops[b.first].layer);
      }
    }
    y += row_h;
  }
  ImGui::EndChild();
  // Legend and issues.
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

}  // namespace lantern::view
