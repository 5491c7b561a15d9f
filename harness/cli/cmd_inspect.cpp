// `lantern inspect RUN_DIR [--compare OTHER_RUN]`: a run summarised through
// the run-directory reader: top ops/kernels by time with achieved rates and
// roofline share, alias violations, KV peak, the memory map. --compare is an
// alias of `lantern compare RUN_DIR OTHER_RUN` (cmd_compare.cpp).
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/inspect_comm.h"
#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/summary.h"
#include "harness/runfmt/trace.h"

namespace lantern::cli {

namespace {

using runfmt::Run;

std::string opt_num(const std::optional<double>& v, const char* fmt) {
  return v ? strformat(fmt, *v) : std::string("-");
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return strformat(u ? "%.2f %s" : "%.0f %s", b, units[u]);
}

double metric(const nlohmann::json& m, const char* a, const char* b = nullptr) {
  const nlohmann::json* v = &m;
  for (const char* k : {a, b}) {
    if (!k) break;
    if (!v->is_object() || !v->contains(k)) return 0;
    v = &(*v)[k];
  }
  return v->is_number() ? v->get<double>() : 0;
}

void print_header(const Run& run) {
  const nlohmann::json& m = run.manifest.json;
  std::string gpu = m.contains("gpu") && m["gpu"].is_object() ? m["gpu"].value("name", "") : "";
  std::string commit = m.contains("git") ? m["git"].value("commit", "") : "";
  bool dirty = m.contains("git") && m["git"].contains("dirty") && m["git"]["dirty"].is_boolean() &&
               m["git"]["dirty"].get<bool>();
  std::printf("run %s  (%s%s%s, commit %.12s%s, %s)\n", run.manifest.name.c_str(),
              run.manifest.backend.c_str(), gpu.empty() ? "" : " on ", gpu.c_str(), commit.c_str(),
              dirty ? " dirty" : "", m.value("created_utc", "").c_str());
  std::printf("  format %d.%d%s\n", run.manifest.format_major, run.manifest.format_minor,
              run.manifest.complete ? "" : "  INCOMPLETE (the run ended before finishing)");
  const nlohmann::json& x = run.metrics;
  std::printf("  requests %.0f  generated %.0f tokens  %.1f tokens/s  decode %.1f tokens/s\n",
              metric(x, "requests"), metric(x, "generated_tokens"), metric(x, "tokens_per_s"),
              metric(x, "decode_tokens_per_s"));
  std::printf("  TTFT p50 %.2f ms p90 %.2f ms   TPOT p50 %.2f ms p90 %.2f ms\n",
              1e3 * metric(x, "ttft_s", "p50"), 1e3 * metric(x, "ttft_s", "p90"),
              1e3 * metric(x, "tpot_s", "p50"), 1e3 * metric(x, "tpot_s", "p90"));
  if (run.manifest.copy_gb_per_s || run.manifest.gemm_tflop_per_s)
    std::printf("  roofline: copy %s GB/s, bf16 GEMM %s TFLOP/s\n",
                opt_num(run.manifest.copy_gb_per_s, "%.0f").c_str(),
                opt_num(run.manifest.gemm_tflop_per_s, "%.0f").c_str());
  if (const std::string clocks = runfmt::clocks_line(m); !clocks.empty())
    std::printf("  GPU clocks: %s%s\n", clocks.c_str(),
                runfmt::clocks_throttled(m) ? "  -- THROTTLED: its times are slower than the card's full clock" : "");
  if (x.contains("steps") && x["steps"].is_object() && x["steps"].contains("overlap")) {
    const nlohmann::json& o = x["steps"]["overlap"];
    if (o.is_object() && o.value("mode", "") == "on")
      std::printf("  overlapped decode: %.0f steps launched ahead of their predecessor's collection (of %.0f decode "
                  "steps), %.0f rows computed past an EOS and ignored\n",
                  metric(o, "continuations"),
                  x["steps"].contains("phases") ? metric(x["steps"]["phases"], "decode", "count") : 0.0,
                  metric(o, "discarded_rows"));
    else if (o.is_object())
      std::printf("  overlapped decode: off (every step synchronous)\n");
  }
  const nlohmann::json& h = x.contains("harness") ? x["harness"] : nlohmann::json::object();
  if (metric(h, "cupti_dropped_records") > 0)
    std::printf("  WARNING: CUPTI dropped %.0f records: kernel timings are incomplete\n",
                metric(h, "cupti_dropped_records"));
  if (metric(h, "unattributed_kernels") > 0)
    std::printf("  note: %.0f kernels were launched outside op hooks (unattributed)\n",
                metric(h, "unattributed_kernels"));
  if (metric(h, "cupti_skipped_steps") > 0) {
    const std::string schedule = h.contains("cupti_schedule") && h["cupti_schedule"].is_string()
                                     ? h["cupti_schedule"].get<std::string>()
                                     : "sampled";
    std::printf("  note: kernel timings sampled (CUPTI schedule: %s): %.0f of %.0f steps traced; "
                "op totals cover those steps only, means per call compare "
                "(--cupti-all-steps traces every step)\n",
                schedule.c_str(), metric(h, "cupti_sampled_steps"),
                metric(h, "cupti_sampled_steps") + metric(h, "cupti_skipped_steps"));
  }
}

// grid, block, regs/thread, shared memory per block and occupancy (limit) of
// the launch configuration that took most of the row's time; '*': the row's
// kernels ran with more than one configuration.
std::string launch_columns(const runfmt::TimeSummary& s) {
  const runfmt::LaunchConfig& c = s.launch_config;
  if (!c.known()) return strformat("%-11s %-9s %4s %6s %-15s", "-", "-", "-", "-", "-");
  const double smem = static_cast<double>(c.static_smem) + c.dynamic_smem;
  const std::string occupancy =
      s.occupancy ? strformat("%.1f%% %s", 100 * s.occupancy->occupancy, s.occupancy->limit.c_str())
                  : "-";
  return strformat("%-11s %-9s %4d %6s %-15.15s",
                   (runfmt::dims_text(c.grid_x, c.grid_y, c.grid_z) + (s.launch_configs > 1 ? "*" : ""))
                       .c_str(),
                   runfmt::dims_text(c.block_x, c.block_y, c.block_z).c_str(), c.regs_per_thread,
                   smem < 1024 ? strformat("%.0f", smem).c_str() : strformat("%.1fK", smem / 1024).c_str(),
                   occupancy.c_str());
}

void print_gaps(const std::vector<runfmt::GapSummary>& gaps, const std::string& phase, size_t top);

// The top table; with `gaps`, also the idle time inside steps by the ops around each gap.
void print_top(const Run& run, runfmt::GroupBy by, const std::string& phase, size_t top, bool gaps) {
  // The engine's start-up planning pass (op kernel_prepare: gemm.6 timing its
  // cuBLASLt candidates) is not step work: listed apart, not in the table.
  std::vector<runfmt::KernelRow> kernels;
  size_t prepare_calls = 0;
  double prepare_us = 0;
  for (const runfmt::KernelRow& r : run.kernels) {
    if (r.op == "kernel_prepare") {
      ++prepare_calls, prepare_us += r.dur_us;
      continue;
    }
    kernels.push_back(r);
  }
  auto rows = runfmt::summarize(kernels, by, phase);
  if (prepare_calls && phase.empty())
    std::printf("\nstart-up kernel_prepare (per-shape planning, not in the table below): %zu kernels, %.3f ms\n",
                prepare_calls, prepare_us / 1e3);
  const char* source = run.kernels.empty() ? "none" : run.kernels.front().source.c_str();
  std::printf("\ntop %s by time (%s, timing: %s)\n", by == runfmt::GroupBy::op ? "ops" : "kernels",
              phase.empty() ? "all phases" : phase.c_str(), source);
  if (rows.empty()) {
    std::printf("  (no kernel records)\n");
    if (gaps) print_gaps({}, phase, top);
    return;
  }
  std::printf("  %-28s %-28s %8s %10s %6s %10s %6s %10s %9s %9s %7s  %-11s %-9s %4s %6s %-15s\n", "name",
              "family.variant", "calls", "total ms", "share", "wall ms", "wall", "mean us", "GB/s", "TFLOP/s",
              "%roof", "grid", "block", "regs", "smem", "occupancy");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const runfmt::TimeSummary& s = rows[i];
    std::string fv = s.family.empty() ? "-" : s.family + "." + s.variant_name;
    std::printf("  %-28.28s %-28.28s %8lld %10.3f %5.1f%% %10.3f %5.1f%% %10.2f %9s %9s %7s  %s\n", s.key.c_str(),
                fv.c_str(), static_cast<long long>(s.rows), s.total_us / 1e3, 100 * s.share, s.wall_us / 1e3,
                100 * s.wall_share, s.mean_us, opt_num(s.gb_per_s, "%.1f").c_str(),
                opt_num(s.tflop_per_s, "%.2f").c_str(), opt_num(s.pct_roofline, "%.1f").c_str(),
                launch_columns(s).c_str());
  }
  double wall = 0;
  for (const runfmt::TimeSummary& s : rows) wall += s.wall_us;
  const std::vector<runfmt::GapSummary> idle_gaps = runfmt::idle_gaps(kernels, phase);
  const double idle = runfmt::idle_in_steps_us(idle_gaps);
  std::printf("  (wall: each kernel's end past the latest end before it in its step -- what removing the work "
              "would save where launches overlap (PDL); busy %.3f ms, idle between kernels inside steps %.3f ms: "
              "--gaps lists it by the ops around each gap)\n",
              wall / 1e3, idle / 1e3);
  if (std::any_of(rows.begin(), rows.end(), [](const auto& s) { return s.launch_config.known(); }))
    std::printf("  (grid, block, regs/thread, smem/block, occupancy and its limit: the launch with the "
                "most time; * more than one launch configuration)\n");
  if (gaps) print_gaps(idle_gaps, phase, top);
}

// --gaps: the idle time inside steps by the ops around each gap.
void print_gaps(const std::vector<runfmt::GapSummary>& gaps, const std::string& phase, size_t top) {
  const double idle = runfmt::idle_in_steps_us(gaps);
  std::printf("\nidle gaps inside steps (%s): %.3f ms in all, by the ops around them\n",
              phase.empty() ? "all phases" : phase.c_str(), idle / 1e3);
  if (gaps.empty()) {
    std::printf("  (none: each step's kernels ran back to back or overlapped)\n");
    return;
  }
  std::printf("  %-28s %-28s %8s %10s %6s %9s %9s\n", "after op", "before op", "gaps", "total ms", "share",
              "mean us", "max us");
  for (size_t i = 0; i < gaps.size() && i < top; ++i) {
    const runfmt::GapSummary& g = gaps[i];
    std::printf("  %-28.28s %-28.28s %8lld %10.3f %5.1f%% %9.2f %9.2f\n", g.before.c_str(), g.after.c_str(),
                static_cast<long long>(g.count), g.total_us / 1e3, idle > 0 ? 100 * g.total_us / idle : 0.0,
                g.total_us / static_cast<double>(g.count), g.max_us);
  }
}

void print_alias(const Run& run) {
  const runfmt::MemoryMap& m = run.memory;
  std::printf("\nalias plan: %lld violations, %lld stale-read warnings, %zu step patterns\n",
              static_cast<long long>(m.violation_count), static_cast<long long>(m.warning_count),
              m.patterns.size());
  for (const runfmt::AliasIssue& v : m.violations)
    std::printf("  VIOLATION x%lld: %s\n", static_cast<long long>(v.occurrences), v.message.c_str());
  for (size_t i = 0; i < m.warnings.size() && i < 5; ++i)
    std::printf("  warning x%lld: %s\n", static_cast<long long>(m.warnings[i].occurrences),
                m.warnings[i].message.c_str());
}

void print_kv(const Run& run) {
  const runfmt::KvData& kv = run.kv;
  double max_frag = 0;
  for (const auto& s : kv.steps) max_frag = std::max(max_frag, s.fragmentation);
  std::printf("\nkv cache: peak %d / %d blocks (step %lld), %zu events, max fragmentation %.1f%%, "
              "%zu leaked, %zu errors\n",
              kv.peak_used_blocks, kv.total_blocks, static_cast<long long>(kv.peak_step),
              kv.events.size(), 100 * max_frag, kv.leaked_blocks.size(), kv.errors.size());
  for (size_t i = 0; i < kv.errors.size() && i < 5; ++i) std::printf("  %s\n", kv.errors[i].c_str());
}

void print_memory(const Run& run) {
  const runfmt::MemoryMap& m = run.memory;
  std::printf("\nmemory map (peak device %s):\n", human_bytes(static_cast<double>(m.peak_device_bytes)).c_str());
  std::printf("  %-18s %-24s %-5s %-18s %12s\n", "owner", "name", "on", "address", "size");
  for (const runfmt::Allocation& a : m.allocations)
    std::printf("  %-18.18s %-24.24s %-5s 0x%-16llx %12s%s\n", a.owner.c_str(), a.name.c_str(),
                a.backend.c_str(), static_cast<unsigned long long>(a.address),
                human_bytes(static_cast<double>(a.bytes)).c_str(), a.free_us ? "  (freed)" : "");
  if (!m.views.empty()) {
    std::printf("  arena %s at 0x%llx: %zu buffers, %zu views\n",
                human_bytes(static_cast<double>(m.arena_bytes)).c_str(),
                static_cast<unsigned long long>(m.arena_address), m.buffers.size(), m.views.size());
    for (const runfmt::ViewRecord& v : m.views) {
      const runfmt::BufferRecord* b = v.buffer >= 0 ? &m.buffers[v.buffer] : nullptr;
      std::printf("    %-20.20s buffer %-20.20s +%-10llu %12s %s\n", v.name.c_str(),
                  b ? b->name.c_str() : "?", static_cast<unsigned long long>(v.offset),
                  human_bytes(static_cast<double>(v.bytes)).c_str(), b ? b->shape.c_str() : "");
    }
  }
  for (const std::string& e : m.errors) std::printf("  ERROR: %s\n", e.c_str());
}

int inspect(const std::vector<std::string>& argv) {
  Args args(argv, {"--compare", "--top", "--phase", "--by"}, {"--check", "--gaps", "--help"});
  if (args.flag("--help") || args.positional().size() != 1) {
    std::fprintf(stderr,
                 "usage: lantern inspect RUN_DIR [--compare OTHER_RUN] [--top N] [--phase "
                 "prefill|decode|mixed] [--by op|kernel] [--gaps] [--check]\n"
                 "  --check   also validate trace.json; exit 1 if the run has alias violations,\n"
                 "            KV or memory-map errors, dropped CUPTI records or a malformed trace\n");
    return args.flag("--help") ? 0 : 2;
  }
  const bool check = args.flag("--check");
  const std::string phase = args.get_or("--phase", "");
  const std::string by_text = args.get_or("--by", "op");
  LANTERN_CHECK(by_text == "op" || by_text == "kernel", "--by expects op or kernel, got '%s'",
                by_text.c_str());
  const long top = args.get_int("--top", 15);
  LANTERN_CHECK(top > 0, "--top expects a positive count");

  if (auto other = args.get("--compare"))  // kept as an alias of `lantern compare`
    return commands().at("compare").fn({args.positional()[0], *other});
  Run run = runfmt::RunReader::open(args.positional()[0], runfmt::ReadOptions{check});
  print_header(run);
  if (run.kernels.empty())
    std::fprintf(stderr,
                 "lantern inspect: warning: %s/kernels.csv has no rows: the run recorded no kernel "
                 "launches (harness off, or --no-cupti on a GPU run)\n",
                 args.positional()[0].c_str());
  print_top(run, by_text == "op" ? runfmt::GroupBy::op : runfmt::GroupBy::kernel, phase,
            static_cast<size_t>(top), args.flag("--gaps"));
  print_communication(run);
  print_alias(run);
  print_kv(run);
  print_memory(run);
  if (!check) return 0;

  std::vector<std::string> problems = runfmt::check_trace(run.trace);
  for (std::string& p : problems) p = "trace.json: " + p;
  if (run.memory.violation_count > 0)
    problems.push_back(strformat("%lld alias violations", static_cast<long long>(run.memory.violation_count)));
  for (const std::string& e : run.memory.errors) problems.push_back("memory.json: " + e);
  for (const std::string& e : run.kv.errors) problems.push_back("kv.json: " + e);
  if (metric(run.metrics, "harness", "cupti_dropped_records") > 0)
    problems.push_back("CUPTI dropped records");
  if (!run.manifest.complete) problems.push_back("the run is incomplete");
  std::printf("\ncheck: %s\n", problems.empty() ? "OK" : "FAILED");
  for (const std::string& p : problems) std::printf("  %s\n", p.c_str());
  return problems.empty() ? 0 : 1;
}

}  // namespace

LANTERN_COMMAND("inspect", "summarise a run directory (--compare: alias of lantern compare)", inspect);

}  // namespace lantern::cli
