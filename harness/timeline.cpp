#include "harness/timeline.h"

#include <algorithm>

#include "kernels/base/errors.h"

namespace lantern::harness {

Timeline::Timeline(uint64_t (*clock)()) : clock_(clock) {
  steps_.reserve(1024);
  layers_.reserve(1 << 14);
  launches_.reserve(1 << 16);
  replays_.reserve(1 << 12);
}

void Timeline::error(std::string message) {
  if (errors_.size() < 100) errors_.push_back(std::move(message));
}

void Timeline::on_step_begin(const StepInfo& s) {
  if (in_step_) error(strformat("step %lld began inside step %lld", static_cast<long long>(s.step),
                                static_cast<long long>(steps_.back().step)));
  StepRecord r;
  r.begin_ns = clock_();
  r.step = s.step;
  r.phase = s.phase ? s.phase : "";
  r.prefill_seqs = s.num_prefill_seqs;
  r.decode_seqs = s.num_decode_seqs;
  r.tokens = s.num_tokens;
  r.first_launch = r.end_launch = static_cast<uint32_t>(launches_.size());
  steps_.push_back(r);
  in_step_ = true;
}

void Timeline::on_step_end(const StepInfo& s) {
  uint64_t now = clock_();
  if (!in_step_ || steps_.back().step != s.step) {
    error(strformat("step %lld ended without beginning", static_cast<long long>(s.step)));
    return;
  }
  StepRecord& r = steps_.back();
  r.end_ns = now;
  r.end_launch = static_cast<uint32_t>(launches_.size());
  // The engine may only know the batch at the end of the step.
  if (s.phase && *s.phase) r.phase = s.phase;
  r.prefill_seqs = s.num_prefill_seqs;
  r.decode_seqs = s.num_decode_seqs;
  r.tokens = s.num_tokens;
  in_step_ = false;
}

void Timeline::on_step_collected(int64_t step) {
  const uint64_t now = clock_();
  // The collected step is the newest or (overlapped) the one before it.
  for (auto it = steps_.rbegin(); it != steps_.rend() && it - steps_.rbegin() < 4; ++it)
    if (it->step == step) {
      it->collected_ns = now;
      return;
    }
  error(strformat("step %lld collected but never begun", static_cast<long long>(step)));
}

uint64_t step_share_ns(const StepRecord& s, uint64_t prev_collected_ns) {
  if (s.collected_ns == 0) return s.end_ns > s.begin_ns ? s.end_ns - s.begin_ns : 0;
  const uint64_t from = std::max(s.begin_ns, prev_collected_ns);
  return s.collected_ns > from ? s.collected_ns - from : 0;
}

void Timeline::on_layer_begin(int layer) {
  if (open_layer_ >= 0) error(strformat("layer %d began inside layer %d", layer, layers_[open_layer_].layer));
  LayerRecord r;
  r.begin_ns = clock_();
  r.step = current_step();
  r.layer = layer;
  layers_.push_back(r);
  open_layer_ = static_cast<int64_t>(layers_.size()) - 1;
}

void Timeline::on_layer_end(int layer) {
  uint64_t now = clock_();
  if (open_layer_ < 0 || layers_[open_layer_].layer != layer) {
    error(strformat("layer %d ended without beginning", layer));
    return;
  }
  layers_[open_layer_].end_ns = now;
  open_layer_ = -1;
}

void Timeline::on_op_begin(const OpInfo& op) {
  if (current_launch_ >= 0)
    error(strformat("op %s began inside op %s", op.op, launches_[current_launch_].op));
  OpLaunch l;
  l.op = op.op ? op.op : "";
  l.kernel = op.kernel;
  l.bytes = op.cost.bytes;
  l.flops = op.cost.flops;
  l.step = current_step();
  l.layer = static_cast<int16_t>(op.layer);
  l.graph = op.graph;
  if (op.graph == OpInfo::kReplay && open_layer_ >= 0) layers_[open_layer_].replay = 1;
  l.step_index = in_step_ ? static_cast<int32_t>(steps_.size()) - 1 : -1;
  current_launch_ = static_cast<int64_t>(launches_.size());
  l.begin_ns = clock_();
  launches_.push_back(l);
}

void Timeline::on_op_end(const OpInfo& op) {
  uint64_t now = clock_();
  if (current_launch_ < 0) {
    error(strformat("op %s ended without beginning", op.op));
    return;
  }
  launches_[current_launch_].end_ns = now;
  current_launch_ = -1;
}

void Timeline::on_graph_replay(const GraphReplay& g) {
  if (current_launch_ >= 0) error(strformat("graph %d replayed inside op %s", g.graph,
                                            launches_[current_launch_].op));
  ReplayRecord r;
  r.t_ns = clock_();
  r.step = current_step();
  r.step_index = in_step_ ? static_cast<int32_t>(steps_.size()) - 1 : -1;
  r.graph = g.graph;
  r.num_ops = g.num_ops;
  replays_.push_back(r);
  // Ops whose cost differs from the capture's (the latest capture of the graph).
  if (!g.ops) return;
  for (auto c = captures_.rbegin(); c != captures_.rend(); ++c) {
    if (c->graph != g.graph) continue;
    const int n = std::min(g.num_ops, c->num_ops);
    for (int k = 0; k < n; ++k) {
      const OpLaunch& captured = launches_[c->first_launch + k];
      const kernels::Cost& cost = g.ops[k].cost;
      const bool declared = cost.bytes > 0 || cost.flops > 0;  // {0, 0}: no cost given, keep the capture's
      if (declared && (cost.bytes != captured.bytes || cost.flops != captured.flops))
        replay_costs_.push_back(ReplayCost{r.step, c->first_launch + static_cast<uint32_t>(k), cost.bytes, cost.flops});
    }
    break;
  }
}

void Timeline::on_graph_captured(const GraphReplay& g) {
  // The graph's ops are the last g.num_ops entries of the op log, hooked
  // with kCapture just before; keep the kernel-node counts the engine found.
  const size_t n = static_cast<size_t>(std::max(g.num_ops, 0));
  bool ok = g.ops && n <= launches_.size();
  for (size_t k = 0; ok && k < n; ++k) ok = launches_[launches_.size() - n + k].graph == OpInfo::kCapture;
  if (!ok) {
    error(strformat("graph %d: its %d ops were not the last ops hooked as captured", g.graph, g.num_ops));
    return;
  }
  const size_t first = launches_.size() - n;
  for (size_t k = 0; k < n; ++k) {
    const int c = g.ops[k].graph_kernels;
    launches_[first + k].graph_kernels = c >= 0 && c <= INT8_MAX ? static_cast<int8_t>(c) : -1;
  }
  captures_.push_back(CaptureRecord{g.graph, g.num_ops, static_cast<uint32_t>(first)});
}

}  // namespace lantern::harness
