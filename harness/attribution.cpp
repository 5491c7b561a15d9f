#include "harness/attribution.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "kernels/base/errors.h"

namespace lantern::harness {

namespace {

double us_since(uint64_t ns, uint64_t origin_ns) {
  return ns >= origin_ns ? static_cast<double>(ns - origin_ns) / 1000.0
                         : -static_cast<double>(origin_ns - ns) / 1000.0;
}

void fill_op(runfmt::KernelRow& r, const OpLaunch& l) {
  r.op = l.op;
  r.layer = l.layer;
  if (l.kernel) {
    r.family = kernels::family_name(l.kernel->family);
    r.variant = l.kernel->variant;
    r.variant_name = l.kernel->name;
  }
}

// Splits an op's cost over its rows by duration and sets the op's rates.
void apply_cost(std::vector<runfmt::KernelRow>& rows, const std::vector<size_t>& members,
                double op_bytes, double op_flops, const Roofline& roofline) {
  double total_us = 0;
  for (size_t i : members) total_us += rows[i].dur_us;
  std::optional<double> gb, tflop, pct;
  if (total_us > 0) {
    if (op_bytes > 0) gb = op_bytes / total_us / 1e3;
    if (op_flops > 0) tflop = op_flops / total_us / 1e6;
    double bound_us = 0;
    if (roofline.copy_gb_per_s && *roofline.copy_gb_per_s > 0 && op_bytes > 0)
      bound_us = std::max(bound_us, op_bytes / (*roofline.copy_gb_per_s * 1e9) * 1e6);
    if (roofline.gemm_tflop_per_s && *roofline.gemm_tflop_per_s > 0 && op_flops > 0)
      bound_us = std::max(bound_us, op_flops / (*roofline.gemm_tflop_per_s * 1e12) * 1e6);
    if (bound_us > 0) pct = bound_us / total_us * 100.0;
  }
  for (size_t i : members) {
    runfmt::KernelRow& r = rows[i];
    double share = total_us > 0 ? r.dur_us / total_us : 1.0 / static_cast<double>(members.size());
    r.bytes = op_bytes * share;
    r.flops = op_flops * share;
    r.gb_per_s = gb;
    r.tflop_per_s = tflop;
    r.pct_roofline = pct;
  }
}

std::unordered_map<int64_t, const char*> phases(const Timeline& timeline) {
  std::unordered_map<int64_t, const char*> out;
  for (const StepRecord& s : timeline.steps()) out[s.step] = s.phase;
  return out;
}

// Rows (in start order) of graph replays whose nodes have no owner: label
// them from a labelled replay of the same graph slot, kernel by kernel, or
// else from the capture (each captured op's kernel-node count, in order).
void label_by_position(std::vector<runfmt::KernelRow>& rows, const Timeline& timeline,
                       AttributionStats& stats) {
  std::unordered_map<int64_t, int> slot_of_step;
  for (const ReplayRecord& r : timeline.replays()) slot_of_step[r.step] = r.graph;
  std::map<uint32_t, std::vector<size_t>> replays;  // graph launch correlation -> its kernel rows
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].graph_node != 0) replays[rows[i].correlation].push_back(i);
  auto slot_of = [&](const std::vector<size_t>& members) {
    auto it = slot_of_step.find(rows[members.front()].step);
    return it == slot_of_step.end() ? -1 : it->second;
  };
  std::map<int, std::vector<size_t>> template_of_slot;  // slot -> a fully labelled replay
  bool any_unlabelled = false;
  for (const auto& [corr, members] : replays) {
    bool labelled = std::all_of(members.begin(), members.end(),
                                [&](size_t i) { return rows[i].launch >= 0; });
    any_unlabelled |= !labelled;
    const int slot = slot_of(members);
    if (labelled && slot >= 0) template_of_slot.emplace(slot, members);
  }
  if (!any_unlabelled) return;
  // Slot -> the ops captured into it (the engine's start-up captures).
  const auto& launches = timeline.launches();
  std::map<int, std::vector<int64_t>> capture_of_slot;
  for (const CaptureRecord& c : timeline.captures()) {
    std::vector<int64_t> ops;
    for (int k = 0; k < c.num_ops; ++k) ops.push_back(static_cast<int64_t>(c.first_launch) + k);
    capture_of_slot[c.graph] = std::move(ops);
  }
  for (const auto& [corr, members] : replays) {
    const int slot = slot_of(members);
    if (slot < 0) continue;
    if (auto t = template_of_slot.find(slot); t != template_of_slot.end() &&
                                              t->second.size() == members.size()) {
      bool same_chain = true;  // kernel by kernel, the same functions in the same order
      for (size_t k = 0; k < members.size() && same_chain; ++k)
        same_chain = rows[members[k]].kernel == rows[t->second[k]].kernel;
      if (same_chain) {
        for (size_t k = 0; k < members.size(); ++k) {
          runfmt::KernelRow& r = rows[members[k]];
          if (r.launch >= 0) continue;
          r.launch = rows[t->second[k]].launch;
          fill_op(r, launches[r.launch]);
          ++stats.by_position;
        }
        continue;
      }
    }
    auto c = capture_of_slot.find(slot);
    if (c == capture_of_slot.end()) continue;
    // The k-th kernel of the replay belongs to the op whose node counts cover k.
    std::vector<int64_t> owner;
    bool known = true;
    for (int64_t l : c->second) {
      known &= launches[l].graph_kernels >= 0;
      owner.insert(owner.end(), std::max<int>(launches[l].graph_kernels, 0), l);
    }
    if (!known || owner.size() != members.size()) continue;
    bool consistent = true;  // rows labelled by node id must agree
    for (size_t k = 0; k < members.size() && consistent; ++k)
      consistent = rows[members[k]].launch < 0 || rows[members[k]].launch == owner[k];
    if (!consistent) continue;
    for (size_t k = 0; k < members.size(); ++k) {
      runfmt::KernelRow& r = rows[members[k]];
      if (r.launch >= 0) continue;
      r.launch = owner[k];
      fill_op(r, launches[r.launch]);
      ++stats.by_capture;
    }
  }
}

}  // namespace

std::vector<runfmt::KernelRow> attribute_gpu_kernels(const GpuRecords& gpu, const Timeline& timeline,
                                                     const Roofline& roofline, uint64_t origin_ns,
                                                     AttributionStats* stats) {
  const auto& launches = timeline.launches();
  const auto phase_of = phases(timeline);
  std::vector<runfmt::KernelRow> rows;
  std::vector<const GpuActivity*> kernels_in_order;
  for (const GpuActivity& a : gpu.activities)
    if (a.kind == GpuActivityKind::kernel) kernels_in_order.push_back(&a);
  std::stable_sort(kernels_in_order.begin(), kernels_in_order.end(),
                   [](const GpuActivity* a, const GpuActivity* b) { return a->start_ns < b->start_ns; });

  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> op_instances;  // (launch, step)
  AttributionStats local;
  for (const GpuActivity* a : kernels_in_order) {
    runfmt::KernelRow r;
    r.kernel = a->name < gpu.names.size() ? gpu.names[a->name] : "?";
    r.source = "cupti";
    r.device = static_cast<int>(a->device);
    r.stream = static_cast<int>(a->stream);
    r.start_us = us_since(a->start_ns, origin_ns);
    r.dur_us = a->end_ns >= a->start_ns ? static_cast<double>(a->end_ns - a->start_ns) / 1000.0 : 0;
    r.graph_node = a->graph_node;
    r.correlation = a->correlation;
    r.launch_config = a->launch;
    if (auto sm = gpu.sm_limits.find(a->device); sm != gpu.sm_limits.end())
      r.occupancy = runfmt::occupancy(a->launch, sm->second);
    int64_t launch = -1;
    if (auto it = gpu.launch_of_correlation.find(a->correlation); it != gpu.launch_of_correlation.end())
      launch = it->second;
    else if (a->graph_node)
      if (auto g = gpu.launch_of_graph_node.find(a->graph_node); g != gpu.launch_of_graph_node.end())
        launch = g->second;
    if (launch >= static_cast<int64_t>(launches.size())) launch = -1;
    int64_t step = -1;
    if (auto it = gpu.step_of_correlation.find(a->correlation); it != gpu.step_of_correlation.end())
      step = it->second;
    else if (launch >= 0)
      step = launches[launch].step;
    r.launch = launch;
    r.step = step;
    if (auto p = phase_of.find(step); p != phase_of.end()) r.phase = p->second;
    if (launch >= 0) fill_op(r, launches[launch]);
    rows.push_back(std::move(r));
  }
  label_by_position(rows, timeline, local);
  for (size_t i = 0; i < rows.size(); ++i) {
    ++local.kernels;
    if (rows[i].launch < 0) {
      ++local.unattributed;
      continue;
    }
    op_instances[{rows[i].launch, rows[i].step}].push_back(i);
  }
  // A replayed op costs what its replay declared when that differs from the capture.
  std::map<std::pair<int64_t, int64_t>, const ReplayCost*> replay_cost;  // (launch, step)
  for (const ReplayCost& c : timeline.replay_costs()) replay_cost[{c.launch, c.step}] = &c;
  for (const auto& [key, members] : op_instances) {
    double bytes = launches[key.first].bytes, flops = launches[key.first].flops;
    if (auto it = replay_cost.find(key); it != replay_cost.end()) bytes = it->second->bytes, flops = it->second->flops;
    apply_cost(rows, members, bytes, flops, roofline);
  }
  if (stats) *stats = local;
  return rows;
}

std::vector<runfmt::KernelRow> host_kernel_rows(const Timeline& timeline, const Roofline& roofline,
                                                uint64_t origin_ns) {
  const auto& launches = timeline.launches();
  const auto& steps = timeline.steps();
  std::vector<runfmt::KernelRow> rows;
  rows.reserve(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const OpLaunch& l = launches[i];
    if (l.graph != OpInfo::kEager) continue;  // no host work timed around it
    runfmt::KernelRow r;
    r.launch = static_cast<int64_t>(i);
    r.step = l.step;
    if (l.step_index >= 0) r.phase = steps[l.step_index].phase;
    fill_op(r, l);
    r.kernel = l.kernel ? strformat("%s.%s", r.family.c_str(), l.kernel->name) : std::string(l.op);
    r.source = "host";
    r.start_us = us_since(l.begin_ns, origin_ns);
    r.dur_us = l.end_ns >= l.begin_ns ? static_cast<double>(l.end_ns - l.begin_ns) / 1000.0 : 0;
    rows.push_back(std::move(r));
    apply_cost(rows, {rows.size() - 1}, l.bytes, l.flops, roofline);
  }
  return rows;
}

}  // namespace lantern::harness
