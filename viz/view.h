#pragma once
// lantern-view's one View (as Tracy's TracyView): the open runs, the shared
// time cursor (step and time) every panel follows, and the panels, each drawn
// by its own file (panel_memory.cpp, panel_lifetimes.cpp, panel_kv.cpp,
// panel_timeline.cpp, panel_kernels.cpp, panel_experiment.cpp). Draws with
// Dear ImGui; all data comes from viz/model (no CUDA, no GL here).
#include <array>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <imgui.h>

#include "viz/model/experiment_edit.h"
#include "viz/model/experiment_model.h"
#include "viz/model/kernel_stats.h"
#include "viz/model/kv_model.h"
#include "viz/model/lifetimes.h"
#include "viz/model/run_data.h"
#include "viz/model/timeline_model.h"

namespace lantern::view {

enum class Panel { memory = 0, lifetimes, kv, timeline, kernels, experiment };
constexpr int kPanels = 6;
const char* panel_name(Panel p);   // command-line name: "memory", "timeline", ...
const char* panel_title(Panel p);  // window title: "Memory map", ...
std::optional<Panel> panel_from_name(const std::string& name);

// The timeline canvas of one frame: where it is and the time window it shows.
struct TimelineFrame {
  ImVec2 origin;
  float x0 = 0, x1 = 0, plot_w = 0, canvas_h = 0;  // the plot's pixel columns
  double t0 = 0, t1 = 1, us_per_px = 1;           // the window, µs
  bool hovered = false;
  float X(double t) const { return x0 + static_cast<float>((t - t0) / us_per_px); }
};

// A run and what the panels derive from it once, at open.
struct LoadedRun {
  RunData data;
  TimelineModel timeline;
  std::vector<KernelStat> by_op, by_variant, by_kernel;
  std::vector<SeqEvent> seq_events;
  double derive_seconds = 0;
};
std::unique_ptr<LoadedRun> load(const std::filesystem::path& dir);

// The shared cursor: a step and a time; setting one moves the other.
struct Cursor {
  int64_t step = -1;
  double t_us = 0;
};

class View {
 public:
  View();
  // Opens a run directory into slot 0 (A) or 1 (B), or a sweep directory
  // (sub-directories that are runs). Problems become messages, never throws.
  void open(const std::filesystem::path& dir, int slot = 0);
  void open_sweep(const std::filesystem::path& dir);
  bool has_run(int slot = 0) const { return runs_[slot] != nullptr; }
  const LoadedRun* run(int slot = 0) const { return runs_[slot].get(); }

  // Interactive frame: menu bar, messages, the open panels in their windows.
  void frame();
  // One panel filling the whole viewport (screenshots, benchmarks).
  void draw_single(Panel p);

  void set_step(int64_t step);    // cursor to a step (its start time)
  void set_time(double t_us);     // cursor to a time (its step)
  const Cursor& cursor() const { return cursor_; }
  // The timeline shows [t0, t1] (and selects nothing new).
  void focus_time(double t0, double t1);
  void fit_timeline_to_run();
  void fit_timeline_to_step();
  // Selects the longest item of the cursor step (a GPU stream's kernel when
  // there are any, else a host op) so the details box shows: screenshots.
  void select_longest_in_step();
  double timeline_t0() const { return tl_.t0; }
  double timeline_t1() const { return tl_.t1; }

  bool& shown(Panel p) { return show_[static_cast<int>(p)]; }
  void register_settings();  // ini-file handler for open panels (call after ImGui::CreateContext)

 private:
  void draw_menu();
  void draw_messages();
  void draw_open_dialog();
  void handle_keys();
  void panel_window(Panel p);
  void draw_panel(Panel p);
  void draw_memory();
  void draw_lifetimes();
  void draw_gantt(const runfmt::MemoryMap& mem, int pattern, const Gantt& g, float width);
  void draw_kv();
  void draw_kv_plots();
  void draw_block_tables();
  void refresh_kv_heatmap(const runfmt::KvData& kv, int want_steps, int want_blocks);
  void draw_timeline();
  struct LaneClick {  // the timeline item clicked this frame
    int lane = -1;
    uint32_t item = 0;
    bool merged = false;
    DrawItem draw;
  };
  void timeline_toolbar();
  void timeline_zoom_pan(TimelineFrame& f);
  LaneClick draw_lanes(ImDrawList* dl, const TimelineFrame& f);
  void draw_lane(ImDrawList* dl, size_t lane, const TimelineFrame& f, float y, LaneClick& click);
  void timeline_clicks(const LaneClick& click, const TimelineFrame& f);
  void timeline_details();
  void draw_kernels();
  void kernel_toolbar();
  void draw_experiment();
  void draw_experiment_run();
  void draw_experiment_ab();
  void draw_experiment_sweep();
  void reset_experiment_edit();  // the editor's draft from run A's manifest
  void draw_experiment_edit();
  void draw_edit_kernels();
  void draw_edit_limits();
  void draw_edit_save();
  void no_data(const char* what);
  void jump_to_group(const std::string& key);  // kernel table row -> timeline and cursor
  void locate_op_and_focus(int64_t step, int op_index, const std::string& op, int layer);

  std::array<std::unique_ptr<LoadedRun>, 2> runs_;
  std::optional<Sweep> sweep_;
  std::filesystem::path sweep_dir_;
  std::vector<LoadMessage> messages_;  // app-level (open failures)
  Cursor cursor_;
  std::array<bool, kPanels> show_{true, true, true, true, true, true};
  std::optional<Panel> single_;  // one panel full-window (keys 1-6), else tiled windows

  struct TimelineState {
    double t0 = 0, t1 = 1;              // visible window, µs
    int sel_lane = -1;
    uint32_t sel_item = 0;              // index in the lane
    bool dragging = false;
    std::vector<DrawItem> scratch;      // reused per lane per frame
  } tl_;
  struct MemoryState {
    double zoom = 1, pan = 0;           // map axis: visible fraction and offset (0..1)
  } mem_;
  struct LifetimeState {
    int hovered_row = -1;
  } life_;
  struct KvState {
    int cached_step_bins = 0, cached_block_bins = 0;
    KvHeatmap heat;
    unsigned int texture = 0;           // the heatmap as one GL texture (one quad to draw)
    int64_t tables_step = -2;
    std::map<int64_t, std::map<int, std::vector<int32_t>>> tables;
  } kv_;
  struct KernelsState {
    int group = 0;                      // 0 op, 1 family.variant, 2 kernel
    int phase = 0;                      // 0 all, 1 prefill, 2 decode, 3 mixed
    char filter[128] = {};
    std::vector<KernelStat> rows;       // current grouping (phase-filtered)
    int rows_group = -1, rows_phase = -1;
    bool resort = true;
  } ker_;
  struct ExperimentEditState {
    std::filesystem::path run_dir;              // the run the draft was made from
    std::optional<EditableExperiment> source;   // nullopt: nothing to edit (why in `unavailable`)
    std::string unavailable;
    ExperimentEdits edits;
    char name[128] = {}, description[512] = {}, path[1024] = {};
    struct Text {
      char text[64] = {};
    };
    std::map<std::string, Text> variant_text;  // runs before format 1.3: a text field per family
    bool overwrite = false;
    std::optional<SaveResult> saved;           // the last "Save as..."
  };
  struct ExperimentState {
    int parameter = 0;
    std::vector<bool> metric_on;
    bool ab_shown = false, sweep_shown = false;  // tabs selected once when they appear
    ExperimentEditState edit;
  } exp_;
  struct OpenDialog {
    bool open = false;
    int slot = 0;
    bool sweep = false;
    char path[1024] = {};
  } dlg_;
};

}  // namespace lantern::view
