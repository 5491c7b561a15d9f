#include "harness/trace_builder.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/base/errors.h"
#include "harness/runfmt/trace.h"

namespace lantern::harness {

namespace {

using runfmt::TraceEvent;
namespace track = runfmt::track;

double us(uint64_t ns, uint64_t origin) {
  return ns >= origin ? static_cast<double>(ns - origin) / 1000.0
                      : -static_cast<double>(origin - ns) / 1000.0;
}

TraceEvent complete(std::string name, const char* cat, int pid, int tid, uint64_t begin_ns,
                    uint64_t end_ns, uint64_t origin, nlohmann::json args = nullptr) {
  TraceEvent e;
  e.ph = 'X';
  e.name = std::move(name);
  e.cat = cat;
  e.pid = pid;
  e.tid = tid;
  e.ts_us = us(begin_ns, origin);
  e.dur_us = static_cast<double>(end_ns - begin_ns) / 1000.0;
  e.args = std::move(args);
  return e;
}

TraceEvent counter(const char* name, double ts_us, nlohmann::json values) {
  TraceEvent e;
  e.ph = 'C';
  e.name = name;
  e.cat = "counter";
  e.pid = track::kCounterPid;
  e.tid = 0;
  e.ts_us = ts_us;
  e.args = std::move(values);
  return e;
}

void host_ranges(const Timeline& t, uint64_t origin, std::vector<TraceEvent>& out) {
  for (const StepRecord& s : t.steps()) {
    if (s.end_ns < s.begin_ns || s.end_ns == 0) continue;  // never ended
    nlohmann::json step_args = {{"step", s.step}, {"phase", s.phase}};
    // When the step's tokens were collected: inside the range for a
    // synchronous step, later (after the next step's launch) for an
    // overlapped one, whose range covers only its planning and launches.
    if (s.collected_ns) step_args["collected_us"] = us(s.collected_ns, origin);
    out.push_back(complete(strformat("step %lld", static_cast<long long>(s.step)), "step",
                           track::kHostPid, track::kEngineTid, s.begin_ns, s.end_ns, origin,
                           std::move(step_args)));
    out.push_back(complete(*s.phase ? s.phase : "step", "phase", track::kHostPid,
                           track::kEngineTid, s.begin_ns, s.end_ns, origin,
                           {{"step", s.step},
                            {"prefill_seqs", s.prefill_seqs},
                            {"decode_seqs", s.decode_seqs},
                            {"tokens", s.tokens}}));
  }
  for (const LayerRecord& l : t.layers()) {
    if (l.end_ns < l.begin_ns || l.end_ns == 0 || l.replay) continue;
    out.push_back(complete(strformat("layer %d", l.layer), "layer", track::kHostPid,
                           track::kEngineTid, l.begin_ns, l.end_ns, origin,
                           {{"layer", l.layer}, {"step", l.step}}));
  }
  for (const ReplayRecord& r : t.replays())
    out.push_back(complete(strformat("graph replay %d", r.graph), "graph", track::kHostPid,
                           track::kEngineTid, r.t_ns, r.t_ns, origin,
                           {{"step", r.step}, {"graph", r.graph}, {"ops", r.num_ops}}));
  const auto& launches = t.launches();
  for (size_t i = 0; i < launches.size(); ++i) {
    const OpLaunch& l = launches[i];
    if (l.end_ns < l.begin_ns || l.end_ns == 0 || l.graph == OpInfo::kReplay) continue;
    nlohmann::json args = {{"launch", i}, {"step", l.step}, {"layer", l.layer},
                           {"bytes", l.bytes}, {"flops", l.flops}};
    if (l.graph == OpInfo::kCapture) args["graph"] = "capture";
    if (l.kernel) {
      args["family"] = kernels::family_name(l.kernel->family);
      args["variant"] = l.kernel->name;
    }
    out.push_back(complete(l.op, "op", track::kHostPid, track::kEngineTid, l.begin_ns, l.end_ns,
                           origin, std::move(args)));
  }
}

// Keeps one GPU stream's records strictly sequential: CUPTI's clock
// conversion can make neighbours overlap by a few nanoseconds.
void trim_stream_overlaps(std::vector<TraceEvent>& events, size_t first, TraceStats& stats) {
  std::map<int, std::vector<TraceEvent*>> streams;
  for (size_t i = first; i < events.size(); ++i) streams[events[i].tid].push_back(&events[i]);
  for (auto& [tid, list] : streams) {
    std::stable_sort(list.begin(), list.end(),
                     [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; });
    double end = -1e300;
    for (TraceEvent* e : list) {
      if (e->ts_us < end) {
        double shift = std::min(end - e->ts_us, e->dur_us);
        e->ts_us += shift;
        e->dur_us -= shift;
        ++stats.trimmed_overlaps;
      }
      end = std::max(end, e->ts_us + e->dur_us);
    }
  }
}

// Grid, block, registers, shared memory and the occupancy they imply.
void add_launch_args(nlohmann::json& args, const runfmt::KernelRow& r) {
  const runfmt::LaunchConfig& c = r.launch_config;
  if (!c.known()) return;
  args["grid"] = {c.grid_x, c.grid_y, c.grid_z};
  args["block"] = {c.block_x, c.block_y, c.block_z};
  args["regs_per_thread"] = c.regs_per_thread;
  args["static_smem_bytes"] = c.static_smem;
  args["dynamic_smem_bytes"] = c.dynamic_smem;
  if (!r.occupancy) return;
  args["blocks_per_sm"] = r.occupancy->blocks_per_sm;
  args["occupancy"] = r.occupancy->occupancy;
  args["waves"] = r.occupancy->waves;
  args["occupancy_limit"] = r.occupancy->limit;
}

TraceEvent kernel_event(const runfmt::KernelRow& r) {
  TraceEvent e;
  e.ph = 'X';
  e.name = r.kernel;
  e.cat = "kernel";
  e.pid = track::kGpuPid;
  e.tid = r.stream;
  e.ts_us = r.start_us;
  e.dur_us = r.dur_us;
  e.args = {{"op", r.op},         {"layer", r.layer},          {"step", r.step},
            {"family", r.family}, {"variant", r.variant_name}, {"bytes", r.bytes},
            {"flops", r.flops},   {"correlation", r.correlation}};
  if (r.gb_per_s) e.args["gb_per_s"] = *r.gb_per_s;
  if (r.tflop_per_s) e.args["tflop_per_s"] = *r.tflop_per_s;
  if (r.pct_roofline) e.args["pct_roofline"] = *r.pct_roofline;
  if (r.graph_node) e.args["graph_node"] = r.graph_node;
  add_launch_args(e.args, r);
  return e;
}

// Kernels (attributed rows), copies and memsets: one track per stream.
void gpu_tracks(const TraceSources& src, std::vector<TraceEvent>& out, TraceStats& stats) {
  std::set<int> streams;
  const size_t first = out.size();
  if (src.gpu_kernels) {
    for (const runfmt::KernelRow& r : *src.gpu_kernels) {
      out.push_back(kernel_event(r));
      streams.insert(r.stream);
    }
  }
  if (src.gpu) {
    for (const GpuActivity& a : src.gpu->activities) {
      if (a.kind == GpuActivityKind::kernel) continue;
      const std::string& name = a.name < src.gpu->names.size() ? src.gpu->names[a.name] : "?";
      nlohmann::json args = {{"bytes", a.bytes}, {"correlation", a.correlation}};
      if (a.graph_node) args["graph_node"] = a.graph_node;
      out.push_back(complete(name, a.kind == GpuActivityKind::memcpy ? "memcpy" : "memset",
                             track::kGpuPid, static_cast<int>(a.stream), a.start_ns,
                             std::max(a.end_ns, a.start_ns), src.origin_ns, std::move(args)));
      streams.insert(static_cast<int>(a.stream));
    }
  }
  trim_stream_overlaps(out, first, stats);
  if (streams.empty()) return;
  out.push_back(runfmt::process_name_event(
      track::kGpuPid, src.gpu_name.empty() ? std::string("GPU") : "GPU: " + src.gpu_name));
  for (int s : streams) out.push_back(runfmt::thread_name_event(track::kGpuPid, s, strformat("stream %d", s)));
}

// CUDA runtime/driver API calls: one track per host thread.
void api_tracks(const GpuRecords& gpu, uint64_t origin, std::vector<TraceEvent>& out) {
  std::set<uint32_t> threads;
  for (const ApiCall& c : gpu.api_calls) {
    const std::string& name = c.name < gpu.names.size() ? gpu.names[c.name] : "?";
    out.push_back(complete(name, "cuda_api", track::kHostPid,
                           track::kCudaApiTid0 + static_cast<int>(c.thread), c.start_ns,
                           std::max(c.end_ns, c.start_ns), origin, {{"correlation", c.correlation}}));
    threads.insert(c.thread);
  }
  for (uint32_t t : threads)
    out.push_back(runfmt::thread_name_event(track::kHostPid, track::kCudaApiTid0 + static_cast<int>(t),
                                            strformat("CUDA API (thread %u)", t)));
}

void counter_tracks(const TraceSources& src, std::vector<TraceEvent>& out) {
  if (src.kv) {
    for (const runfmt::KvStepRecord& s : src.kv->steps) {
      out.push_back(counter("kv blocks", s.t_us, {{"used", s.used_blocks}, {"free", s.free_blocks}}));
      if (s.wasted_token_slots >= 0)
        out.push_back(counter("kv fragmentation", s.t_us,
                              {{"wasted_slots", s.wasted_token_slots},
                               {"percent", s.fragmentation * 100.0}}));
    }
  }
  if (src.memory) {
    for (const MemoryRecorder::Sample& m : *src.memory) {
      out.push_back(counter("device memory", us(m.t_ns, src.origin_ns), {{"bytes", m.device_bytes}}));
      out.push_back(counter("host memory", us(m.t_ns, src.origin_ns), {{"bytes", m.host_bytes}}));
    }
  }
}

}  // namespace

std::vector<TraceEvent> build_trace(const TraceSources& src, TraceStats* stats_out) {
  TraceStats stats;
  std::vector<TraceEvent> out;
  out.push_back(runfmt::process_name_event(track::kHostPid, "lantern host"));
  out.push_back(runfmt::thread_name_event(track::kHostPid, track::kEngineTid, "engine"));
  out.push_back(runfmt::process_name_event(track::kCounterPid, "lantern counters"));
  if (src.timeline) host_ranges(*src.timeline, src.origin_ns, out);
  gpu_tracks(src, out, stats);
  if (src.gpu) api_tracks(*src.gpu, src.origin_ns, out);
  counter_tracks(src, out);
  if (stats_out) *stats_out = stats;
  return out;
}

}  // namespace lantern::harness
