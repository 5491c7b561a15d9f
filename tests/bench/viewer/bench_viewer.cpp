// lantern-view on big runs: time to open a run of N kernel events (from the
// timeline.bin side file, and from trace.json + kernels.csv for comparison),
// and frame times of the timeline panning at three zoom levels and of every
// other panel. Frames need a display: run under `xvfb-run -a` (Mesa llvmpipe
// on machines without a GPU). Goal (issue 12): 1M events open in <= 2 s and
// pan at >= 60 frames/s on the 2-core CI machine. Frame benchmarks report
// process CPU time (llvmpipe rasterises on its own threads), which does not
// depend on how busy a shared machine is. Results: docs/performance.md.
//
//   xvfb-run -a build/default/bench/bench_viewer
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "harness/runfmt/run_dir.h"
#include "tests/viz/synthetic_run.h"
#include <imgui.h>

#include "viz/app_window.h"
#include "viz/view.h"

namespace {

namespace fs = std::filesystem;
using namespace lantern;

// Generated once per size and kept under the build folder (bench-runs/).
fs::path synthetic_run(int64_t kernels, bool with_index) {
  fs::path dir = fs::path(LANTERN_BINARY_DIR) / "bench-runs" /
                 ("synthetic-" + std::to_string(kernels) + (with_index ? "" : "-json"));
  if (!runfmt::RunReader::is_run_dir(dir)) {
    std::fprintf(stderr, "bench_viewer: writing a synthetic run of %lld kernels to %s\n",
                 static_cast<long long>(kernels), dir.c_str());
    fs::remove_all(dir);
    test::SyntheticRunOptions o;
    o.kernels = kernels;
    o.streams = 2;
    o.timeline_index = with_index;
    test::write_synthetic_run(dir, o);
  }
  return dir;
}

void BM_OpenRun(benchmark::State& state) {
  const fs::path dir = synthetic_run(state.range(0), true);
  for (auto _ : state) {
    auto run = view::load(dir);
    benchmark::DoNotOptimize(run.get());
    state.counters["load_s"] = run->data.load_seconds;
    state.counters["derive_s"] = run->derive_seconds;
  }
  state.counters["kernels"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_OpenRun)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_OpenRunFromJson(benchmark::State& state) {
  const fs::path dir = synthetic_run(state.range(0), false);
  for (auto _ : state) {
    auto run = view::load(dir);
    benchmark::DoNotOptimize(run.get());
  }
  state.counters["kernels"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_OpenRunFromJson)->Arg(100000)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// One window for every frame benchmark.
struct Gui {
  std::unique_ptr<view::AppWindow> window;
  std::unique_ptr<view::View> view;
};
Gui* gui() {
  static Gui* g = [] {
    auto* g = new Gui;
    if (!std::getenv("DISPLAY")) return g;
    view::WindowOptions o;
    // LANTERN_BENCH_WINDOW=WxH overrides the 1600x900 window.
    if (const char* size = std::getenv("LANTERN_BENCH_WINDOW")) std::sscanf(size, "%dx%d", &o.width, &o.height);
    else o.width = 1600, o.height = 900;
    o.vsync = false;
    g->window = std::make_unique<view::AppWindow>(o);
    g->view = std::make_unique<view::View>();
    g->view->open(synthetic_run(1000000, true));
    return g;
  }();
  return g;
}

// The window, or nullptr after marking the benchmark skipped (no display).
Gui* gui_or_skip(benchmark::State& state) {
  Gui* g = gui();
  if (!g->window) {
    state.SkipWithError("no display: run under xvfb-run -a");
    return nullptr;
  }
  return g;
}

// One frame: clear, ImGui, `draw`, render, swap.
template <class Draw>
void frame_with(Gui* g, Draw draw) {
  g->window->begin_frame(true);
  draw();
  g->window->render();
  g->window->swap();
}

void frame(Gui* g, view::Panel panel) {
  frame_with(g, [&] { g->view->draw_single(panel); });
}

void count_fps(benchmark::State& state) {
  state.counters["fps"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Pans the timeline by 1/120 of its width per frame at a zoom of
// `state.range(0)`: 0 the whole run, 1 one step (~1.4 ms), 2 a 100 µs window.
void BM_TimelinePanFrame(benchmark::State& state) {
  Gui* g = gui_or_skip(state);
  if (!g) return;
  const auto& tm = g->view->run()->timeline;
  const double mid = (tm.t_begin + tm.t_end) / 2;
  double width = state.range(0) == 0 ? tm.t_end - tm.t_begin : state.range(0) == 1 ? 1400 : 100;
  double t0 = state.range(0) == 0 ? tm.t_begin : mid;
  for (int i = 0; i < 3; ++i) frame(g, view::Panel::timeline);  // warm-up
  for (auto _ : state) {
    t0 += width / 120;
    g->view->focus_time(t0, t0 + width);
    frame(g, view::Panel::timeline);
  }
  count_fps(state);
}
BENCHMARK(BM_TimelinePanFrame)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime()->MeasureProcessCPUTime();

// The floor: an empty frame (clear, ImGui, swap) at the same window size.
void BM_EmptyFrame(benchmark::State& state) {
  Gui* g = gui_or_skip(state);
  if (!g) return;
  for (auto _ : state) frame_with(g, [] {});
  count_fps(state);
}
BENCHMARK(BM_EmptyFrame)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->MeasureProcessCPUTime();

// One full-window ImGui window with a line of text: what any panel costs at least.
void blank_window() {
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  ImGui::Begin("blank", nullptr, ImGuiWindowFlags_NoSavedSettings);
  ImGui::TextUnformatted("blank");
  ImGui::End();
}

void BM_BlankWindowFrame(benchmark::State& state) {
  Gui* g = gui_or_skip(state);
  if (!g) return;
  for (auto _ : state) frame_with(g, blank_window);
  count_fps(state);
}
BENCHMARK(BM_BlankWindowFrame)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->MeasureProcessCPUTime();

void BM_PanelFrame(benchmark::State& state) {
  Gui* g = gui_or_skip(state);
  if (!g) return;
  const auto panel = static_cast<view::Panel>(state.range(0));
  state.SetLabel(view::panel_name(panel));
  g->view->set_step(40);
  for (int i = 0; i < 3; ++i) frame(g, panel);
  for (auto _ : state) frame(g, panel);
  count_fps(state);
}
BENCHMARK(BM_PanelFrame)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
