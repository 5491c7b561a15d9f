// KV occupancy panel: a heatmap of blocks x steps coloured by owning sequence
// (binned to pixels), admissions / preemptions / finishes marked above it;
// used, free and fragmentation curves under it on the same step axis; every
// live sequence's block table at the cursor step.
#include <GL/gl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

// Uploads the heatmap as an RGBA texture (columns = step bins, rows = block
// bins, block 0 at the bottom): the panel then draws one quad however many
// cells there are, which software GL needs.
void upload_heatmap(const KvHeatmap& h, unsigned int& texture) {
  std::vector<uint32_t> pixels(static_cast<size_t>(h.step_bins) * h.block_bins, IM_COL32(34, 34, 38, 255));
  for (int c = 0; c < h.step_bins; ++c)
    for (int b = 0; b < h.block_bins; ++b) {
      const size_t cell = static_cast<size_t>(c) * h.block_bins + b;
      if (h.used[cell] <= 0) continue;
      const ImVec4 bg(34 / 255.f, 34 / 255.f, 38 / 255.f, 1);
      ImVec4 fg = ImGui::ColorConvertU32ToFloat4(ui::color_for(static_cast<uint64_t>(h.owner[cell])));
      const float a = 0.35f + 0.65f * h.used[cell];  // blended here: the texture is opaque
      pixels[static_cast<size_t>(h.block_bins - 1 - b) * h.step_bins + c] = ImGui::ColorConvertFloat4ToU32(
          ImVec4(bg.x + (fg.x - bg.x) * a, bg.y + (fg.y - bg.y) * a, bg.z + (fg.z - bg.z) * a, 1));
    }
  if (!texture) glGenTextures(1, &texture);
  glBindTexture(GL_TEXTURE_2D, texture);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, h.step_bins, h.block_bins, 0, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
}

// The plots' geometry: the event marks, the heatmap, the curves, one
// column per recorded step.
struct KvFrame {
  ImVec2 p;
  float x0, x1, heat_y0, heat_y1, curve_y0, curve_y1;
  int nsteps;
  float X(double column) const { return x0 + static_cast<float>(column / nsteps) * (x1 - x0); }
};
constexpr float kMarksH = 16;

int column_of(const runfmt::KvData& kv, int64_t step) {
  auto it = std::lower_bound(kv.steps.begin(), kv.steps.end(), step,
                             [](const runfmt::KvStepRecord& s, int64_t v) { return s.step < v; });
  return static_cast<int>(it - kv.steps.begin());
}

void kv_header(const runfmt::KvData& kv) {
  ImGui::Text("%d blocks x %d tokens, peak %d used at step %lld, %zu block events, %zu steps%s", kv.total_blocks,
              kv.block_size, kv.peak_used_blocks, static_cast<long long>(kv.peak_step), kv.events.size(),
              kv.steps.size(), kv.leaked_blocks.empty() ? "" : "  LEAKED BLOCKS");
  for (const std::string& e : kv.errors) ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "kv error: %s", e.c_str());
}

// Admissions (green up), preemptions (red down) and finishes (grey) above the heatmap.
void sequence_marks(ImDrawList* dl, const runfmt::KvData& kv, const std::vector<SeqEvent>& events, const KvFrame& f) {
  dl->AddText(ImVec2(f.p.x, f.p.y), ui::kDimText, "events");
  for (const SeqEvent& e : events) {
    const float x = f.X(column_of(kv, e.step) + 0.5);
    const float my = f.p.y + kMarksH / 2 + 2;
    if (e.kind == SeqEvent::admit)
      dl->AddTriangleFilled(ImVec2(x - 4, my + 5), ImVec2(x + 4, my + 5), ImVec2(x, my - 4), ui::kGreen);
    else if (e.kind == SeqEvent::preempt)
      dl->AddTriangleFilled(ImVec2(x - 5, my - 5), ImVec2(x + 5, my - 5), ImVec2(x, my + 6), ui::kRed);
    else
      dl->AddCircleFilled(ImVec2(x, my), 3, ui::kGrey);
  }
}

// Used and free blocks, fragmentation (its own scale, %), and their labels.
void occupancy_curves(ImDrawList* dl, const runfmt::KvData& kv, const KvFrame& f) {
  dl->AddRect(ImVec2(f.x0, f.curve_y0), ImVec2(f.x1, f.curve_y1), ui::kGridLine);
  ui::value_axis(dl, f.x0 - 2, f.curve_y0, f.curve_y1, 0, kv.total_blocks, "blocks");
  double max_frag = 0;
  for (const auto& s : kv.steps) max_frag = std::max(max_frag, s.fragmentation);
  const double frag_top = max_frag > 0 ? std::min(1.0, max_frag * 1.2) : 1;
  auto Yb = [&](double v) { return f.curve_y1 - static_cast<float>(v / kv.total_blocks) * (f.curve_y1 - f.curve_y0); };
  auto Yf = [&](double v) { return f.curve_y1 - static_cast<float>(v / frag_top) * (f.curve_y1 - f.curve_y0); };
  const int stride = std::max(1, f.nsteps / std::max(1, static_cast<int>(f.x1 - f.x0)));
  for (int i = stride; i < f.nsteps; i += stride) {
    const auto &a = kv.steps[i - stride], &b = kv.steps[i];
    const float xa = f.X(i - stride + 0.5), xb = f.X(i + 0.5);
    dl->AddLine(ImVec2(xa, Yb(a.used_blocks)), ImVec2(xb, Yb(b.used_blocks)), ui::kOrange, 1.5f);
    dl->AddLine(ImVec2(xa, Yb(a.free_blocks)), ImVec2(xb, Yb(b.free_blocks)), ui::kGreen, 1.5f);
    dl->AddLine(ImVec2(xa, Yf(a.fragmentation)), ImVec2(xb, Yf(b.fragmentation)), IM_COL32(150, 170, 255, 255), 1.2f);
  }
  char frag_label[64];
  std::snprintf(frag_label, sizeof frag_label, "fragmentation: 0..%.0f %%", frag_top * 100);
  dl->AddText(ImVec2(f.x0 + 6, f.curve_y0 + 2), ui::kOrange, "used");
  dl->AddText(ImVec2(f.x0 + 50, f.curve_y0 + 2), ui::kGreen, "free");
  dl->AddText(ImVec2(f.x0 + 94, f.curve_y0 + 2), IM_COL32(150, 170, 255, 255), frag_label);
}

// Step numbers under the curves.
void step_axis(ImDrawList* dl, const runfmt::KvData& kv, const KvFrame& f) {
  const double step_tick = ui::nice_step(f.nsteps, std::max(2, static_cast<int>((f.x1 - f.x0) / 80)));
  for (double c = 0; c < f.nsteps - step_tick * 0.4; c += step_tick) {
    const float x = f.X(c + 0.5);
    dl->AddLine(ImVec2(x, f.curve_y1), ImVec2(x, f.curve_y1 + 4), ui::kDimText);
    dl->AddText(ImVec2(x + 2, f.curve_y1 + 3), ui::kDimText, std::to_string(kv.steps[static_cast<int>(c)].step).c_str());
  }
  dl->AddText(ImVec2(f.x0 - 40, f.curve_y1 + 3), ui::kDimText, "step");
}

// The step under the mouse (and the heatmap cell when over it).
void step_tooltip(const LoadedRun& run, const KvHeatmap& h, const KvFrame& f, int col) {
  const runfmt::KvData& kv = run.data.kv;
  ImGuiIO& io = ImGui::GetIO();
  const auto& s = kv.steps[col];
  ImGui::BeginTooltip();
  ImGui::Text("step %lld", static_cast<long long>(s.step));
  ui::kv_line("used / free", std::to_string(s.used_blocks) + " / " + std::to_string(s.free_blocks) + " blocks");
  ui::kv_line("fragmentation", ui::number(s.fragmentation * 100, 3) + " % (" + std::to_string(s.wasted_token_slots) +
                                   " wasted token slots)");
  ui::kv_line("sequences", std::to_string(s.num_seqs));
  if (io.MousePos.y >= f.heat_y0 && io.MousePos.y < f.heat_y1 && h.block_bins > 0) {
    const float ch = (f.heat_y1 - f.heat_y0) / std::max(1, h.block_bins);
    const int b = std::clamp(static_cast<int>((f.heat_y1 - io.MousePos.y) / ch), 0, h.block_bins - 1);
    const int c = std::min(col / h.steps_per_bin, h.step_bins - 1);
    const size_t cell = static_cast<size_t>(c) * h.block_bins + b;
    ui::kv_line("blocks", std::to_string(b * h.blocks_per_bin) + ".." +
                              std::to_string(std::min(kv.total_blocks, (b + 1) * h.blocks_per_bin) - 1));
    ui::kv_line("owner", h.owner[cell] >= 0 ? "sequence " + std::to_string(h.owner[cell]) + " (" +
                                                  ui::number(h.used[cell] * 100, 3) + " % used)"
                                            : "free");
  }
  for (const SeqEvent& e : run.seq_events)
    if (e.step == s.step)
      ImGui::Text("%s sequence %lld",
                  e.kind == SeqEvent::admit ? "admitted" : e.kind == SeqEvent::preempt ? "PREEMPTED" : "finished",
                  static_cast<long long>(e.seq));
  ImGui::EndTooltip();
}

}  // namespace

// The heatmap binned to the pixels it covers, uploaded once per size.
void View::refresh_kv_heatmap(const runfmt::KvData& kv, int want_steps, int want_blocks) {
  if (kv_.cached_step_bins == want_steps && kv_.cached_block_bins == want_blocks) return;
  kv_.heat = bin_kv(kv, want_blocks, want_steps);
  if (kv_.heat.step_bins > 0 && kv_.heat.block_bins > 0) upload_heatmap(kv_.heat, kv_.texture);
  kv_.cached_step_bins = want_steps;
  kv_.cached_block_bins = want_blocks;
}

// Events, heatmap, curves and the step axis on one step axis; hover shows a
// step, click moves the cursor there.
void View::draw_kv_plots() {
  const LoadedRun& run = *runs_[0];
  const runfmt::KvData& kv = run.data.kv;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  KvFrame f;
  f.p = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float axis_w = 58;
  f.x0 = f.p.x + axis_w, f.x1 = f.p.x + avail.x - 8;
  f.heat_y0 = f.p.y + kMarksH + 16, f.heat_y1 = f.heat_y0 + std::max(80.f, (avail.y - 60) * 0.58f);
  f.curve_y0 = f.heat_y1 + 30, f.curve_y1 = f.p.y + avail.y - 24;
  f.nsteps = static_cast<int>(kv.steps.size());
  ImGui::InvisibleButton("##kvcanvas", avail);
  const bool hovered = ImGui::IsItemHovered();
  refresh_kv_heatmap(kv, std::max(1, static_cast<int>(f.x1 - f.x0)), std::max(1, static_cast<int>(f.heat_y1 - f.heat_y0)));
  if (kv_.texture)
    dl->AddImage(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(kv_.texture)), ImVec2(f.x0, f.heat_y0),
                 ImVec2(f.x1, f.heat_y1));
  ui::value_axis(dl, f.x0 - 2, f.heat_y0, f.heat_y1, 0, kv.total_blocks, "block");
  sequence_marks(dl, kv, run.seq_events, f);
  occupancy_curves(dl, kv, f);
  step_axis(dl, kv, f);
  const int cursor_col = column_of(kv, cursor_.step);
  if (cursor_col < f.nsteps) {
    const float x = f.X(cursor_col + 0.5);
    dl->AddLine(ImVec2(x, f.p.y), ImVec2(x, f.curve_y1), ui::kCursor, 1.5f);
  }
  if (hovered && io.MousePos.x >= f.x0 && io.MousePos.x < f.x1) {
    const int col = std::clamp(static_cast<int>((io.MousePos.x - f.x0) / (f.x1 - f.x0) * f.nsteps), 0, f.nsteps - 1);
    step_tooltip(run, kv_.heat, f, col);
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) set_step(kv.steps[col].step);
  }
}

// Every live sequence's block table after the cursor step (a few layers each).
void View::draw_block_tables() {
  const runfmt::KvData& kv = runs_[0]->data.kv;
  if (kv_.tables_step != cursor_.step) {
    kv_.tables = block_tables_at(kv, cursor_.step);
    kv_.tables_step = cursor_.step;
  }
  ImGui::Text("Block tables after step %lld", static_cast<long long>(cursor_.step));
  ui::legend_chip(ui::kGreen, "admit");
  ImGui::SameLine();
  ui::legend_chip(ui::kRed, "preempt");
  ImGui::SameLine();
  ui::legend_chip(ui::kGrey, "finish");
  ImGui::Separator();
  if (kv_.tables.empty()) ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "no sequence holds blocks");
  for (const auto& [seq, layers] : kv_.tables) {
    size_t n = 0;
    for (const auto& [layer, blocks] : layers) n += blocks.size();
    ui::legend_chip(ui::color_for(static_cast<uint64_t>(seq)),
                    "seq " + std::to_string(seq) + ": " + std::to_string(n) + " blocks, " +
                        std::to_string(layers.size()) + " layers");
    for (const auto& [layer, blocks] : layers) {
      std::string line = "  L" + std::to_string(layer) + ": ";
      for (size_t i = 0; i < blocks.size() && i < 24; ++i) line += std::to_string(blocks[i]) + " ";
      if (blocks.size() > 24) line += "... (" + std::to_string(blocks.size()) + ")";
      ImGui::TextColored(ImVec4(0.8f, 0.8f, 0.8f, 1), "%s", line.c_str());
      if (layers.size() > 4 && layer >= layers.begin()->first + 1) {
        ImGui::TextColored(ImVec4(0.6f, 0.6f, 0.6f, 1), "  ... %zu more layers", layers.size() - 2);
        break;
      }
    }
  }
}

void View::draw_kv() {
  const runfmt::KvData& kv = runs_[0]->data.kv;
  if (kv.total_blocks <= 0 || kv.steps.empty()) {
    no_data("No KV data (kv.json empty or unreadable; harness KV recorder off?)");
    return;
  }
  kv_header(kv);
  const float tables_w = std::min(330.f, ImGui::GetContentRegionAvail().x * 0.3f);
  ImGui::BeginChild("##kvplots", ImVec2(-tables_w, 0));
  draw_kv_plots();
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("##tables", ImVec2(0, 0), true);
  draw_block_tables();
  ImGui::EndChild();
}

}  // namespace lantern::view
