#include "harness/alias_tracker.h"

#include <algorithm>
#include <functional>

#include "engine/arena.h"
#include "kernels/base/errors.h"

namespace lantern::harness {

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  // 64-bit FNV-style mixing: patterns are compared in full after a hash hit.
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

void AliasTracker::on_arena(const Arena& arena) {
  std::vector<TrackedView> views;
  for (const ArenaView& v : arena.views()) {
    const ArenaBuffer& b = arena.buffers().at(v.buffer);
    views.push_back(TrackedView{v.name, b.offset + v.offset, b.offset + v.offset + v.bytes});
  }
  set_views(std::move(views));
}

void AliasTracker::set_views(std::vector<TrackedView> views) {
  views_ = std::move(views);
  overlaps_.assign(views_.size(), {});
  for (size_t a = 0; a < views_.size(); ++a)
    for (size_t b = 0; b < views_.size(); ++b)
      if (a != b && views_[a].begin < views_[b].end && views_[b].begin < views_[a].end)
        overlaps_[a].push_back(static_cast<int>(b));
  ops_.reserve(1024);
  accesses_.reserve(4096);
}

const std::string& AliasTracker::view_name(int v) const { return views_.at(v).name; }

void AliasTracker::on_step_begin(const StepInfo& s) {
  if (!ops_.empty()) close_step();  // ops logged outside a step
  step_ = s.step;
  in_step_ = true;
}

void AliasTracker::on_step_end(const StepInfo& s) {
  step_ = s.step;
  close_step();
  in_step_ = false;
  step_ = -1;
}

void AliasTracker::finish() {
  if (!ops_.empty()) close_step();
}

void AliasTracker::on_graph_replay(const GraphReplay& g) {
  const std::pair<const OpInfo*, int> key{g.ops, g.num_ops};
  if (in_step_ && ops_.empty() && !replay_pending_ && learn_key_.first == nullptr) {
    if (graph_patterns_.count(key)) {
      pending_replay_ = g;  // expanded only if the step logs anything else
      replay_pending_ = true;
      return;
    }
    learn_key_ = key;  // close_step stores the pattern if the step holds nothing else
  } else {
    expand_pending_replay();
    learn_key_ = {nullptr, 0};
  }
  expand(g);
}

void AliasTracker::expand(const GraphReplay& g) {
  expanding_ = true;
  Observer::on_graph_replay(g);  // logs the ops through on_op_begin
  expanding_ = false;
}

void AliasTracker::expand_pending_replay() {
  if (!replay_pending_) return;
  replay_pending_ = false;
  expand(pending_replay_);
}

void AliasTracker::on_op_begin(const OpInfo& op) {
  if (!expanding_) {  // an op of its own: the step is more than one replay
    expand_pending_replay();
    learn_key_ = {nullptr, 0};
  }
  // A captured op runs later, when the graph is replayed; its replay hooks
  // declare the same accesses in the same order.
  if (op.graph == OpInfo::kCapture) return;
  const int32_t index = static_cast<int32_t>(ops_.size());
  ops_.push_back(OpKey{op.op ? op.op : "", op.layer});
  const int n = static_cast<int>(views_.size());
  auto add = [&](const ViewId* ids, int count, int32_t write) {
    for (int i = 0; i < count; ++i) {
      if (ids[i] < 0 || ids[i] >= n) {
        if (errors_.size() < 100)
          errors_.push_back(strformat("op '%s' (layer %d) declares view id %d but the arena has "
                                      "%d views",
                                      op.op, op.layer, ids[i], n));
        continue;
      }
      accesses_.push_back(Access{index, ids[i], write});
    }
  };
  add(op.reads, op.num_reads, 0);    // an op reads its inputs before it writes
  add(op.writes, op.num_writes, 1);
}

void AliasTracker::close_step() {
  const int64_t step = in_step_ ? step_ : -1;
  int id = -1;
  if (replay_pending_ && ops_.empty()) {
    id = graph_patterns_.at({pending_replay_.ops, pending_replay_.num_ops});
    replay_pending_ = false;
  } else {
    expand_pending_replay();
    id = find_or_analyse(step);
    if (learn_key_.first != nullptr) graph_patterns_[learn_key_] = id;
  }
  learn_key_ = {nullptr, 0};
  const Pattern& p = patterns_[id];
  for (size_t i = 0; i < p.issues.size(); ++i) {
    const IssueRef& ref = issue_table_[p.issues[i]];
    runfmt::AliasIssue& issue = ref.violation ? violations_[ref.index] : warnings_[ref.index];
    issue.occurrences += p.issue_hits[i];
    (ref.violation ? violation_count_ : warning_count_) += p.issue_hits[i];
  }
  step_patterns_.emplace_back(step, id);
  ops_.clear();
  accesses_.clear();
}

int AliasTracker::find_or_analyse(int64_t step) {
  uint64_t h = ops_.size();
  for (const OpKey& k : ops_) h = mix(mix(h, reinterpret_cast<uintptr_t>(k.op)), k.layer);
  for (const Access& a : accesses_)
    h = mix(h, (static_cast<uint64_t>(a.op_index) << 32) ^ (static_cast<uint64_t>(a.view) << 1) ^
                   a.write);
  int id = -1;
  auto [lo, hi] = pattern_index_.equal_range(h);
  for (auto it = lo; it != hi && id < 0; ++it) {
    const Pattern& p = patterns_[it->second];
    if (p.ops == ops_ && p.accesses == accesses_) id = it->second;
  }
  if (id < 0) id = analyse(h, step);
  return id;
}

void AliasTracker::record_issue(Pattern& p, runfmt::AliasIssue issue, const std::string& key) {
  auto it = issue_by_key_.find(key);
  size_t table_index;
  if (it == issue_by_key_.end()) {
    bool violation = issue.kind == "clobber";
    auto& list = violation ? violations_ : warnings_;
    issue.occurrences = 0;  // counted when a step with this pattern closes
    list.push_back(std::move(issue));
    table_index = issue_table_.size();
    issue_table_.push_back(IssueRef{violation, list.size() - 1});
    issue_by_key_.emplace(key, table_index);
  } else {
    table_index = it->second;
  }
  auto pos = std::find(p.issues.begin(), p.issues.end(), table_index);
  if (pos == p.issues.end()) {
    p.issues.push_back(table_index);
    p.issue_hits.push_back(1);
  } else {
    p.issue_hits[pos - p.issues.begin()] += 1;
  }
}

int AliasTracker::analyse(uint64_t hash, int64_t step) {
  Pattern p;
  p.ops = ops_;
  p.accesses = accesses_;
  const auto op_ref = [&](int index) {
    return index < 0 ? runfmt::OpRef{"", -1} : runfmt::OpRef{p.ops[index].op, p.ops[index].layer};
  };
  // Live intervals, per view in program order.
  std::vector<std::vector<runfmt::LiveInterval>> live(views_.size());
  for (const Access& a : p.accesses) {
    auto& intervals = live[a.view];
    if (a.write) {
      intervals.push_back(runfmt::LiveInterval{a.view, a.op_index, -1});
      continue;
    }
    if (intervals.empty()) {
      intervals.push_back(runfmt::LiveInterval{a.view, -1, a.op_index});
      runfmt::AliasIssue w;
      w.kind = "stale_read";
      w.step = step;
      w.op_index = a.op_index;
      w.op = op_ref(a.op_index);
      w.view = view_name(a.view);
      w.message = strformat("step %lld: op '%s' (layer %d, op #%d) reads view '%s' before any op "
                            "wrote it in the step",
                            static_cast<long long>(step), w.op.op.c_str(), w.op.layer, a.op_index,
                            w.view.c_str());
      std::string key = "stale|" + w.op.op + "|" + w.view;
      record_issue(p, std::move(w), key);
    } else {
      intervals.back().last_read = std::max(intervals.back().last_read, a.op_index);
    }
  }
  // Clobbers: a write into bytes of another view whose live value is read later.
  for (const Access& a : p.accesses) {
    if (!a.write) continue;
    for (int victim : overlaps_[a.view]) {
      for (const runfmt::LiveInterval& l : live[victim]) {
        if (!(l.first_write < a.op_index && l.last_read > a.op_index)) continue;
        runfmt::AliasIssue c;
        c.kind = "clobber";
        c.step = step;
        c.op_index = a.op_index;
        c.op = op_ref(a.op_index);
        c.view = view_name(a.view);
        c.victim = view_name(victim);
        c.victim_write_index = l.first_write;
        c.victim_write = op_ref(l.first_write);
        c.victim_read_index = l.last_read;
        c.victim_read = op_ref(l.last_read);
        c.overlap_begin = std::max(views_[a.view].begin, views_[victim].begin);
        c.overlap_end = std::min(views_[a.view].end, views_[victim].end);
        std::string writer = l.first_write < 0
                                 ? std::string("an earlier step")
                                 : strformat("op '%s' (layer %d, op #%d)", c.victim_write.op.c_str(),
                                             c.victim_write.layer, l.first_write);
        c.message = strformat(
            "step %lld: op '%s' (layer %d, op #%d) writes view '%s' over arena bytes [%llu, %llu) "
            "of view '%s', which %s wrote and op '%s' (layer %d, op #%d) still reads",
            static_cast<long long>(step), c.op.op.c_str(), c.op.layer, a.op_index, c.view.c_str(),
            static_cast<unsigned long long>(c.overlap_begin),
            static_cast<unsigned long long>(c.overlap_end), c.victim.c_str(), writer.c_str(),
            c.victim_read.op.c_str(), c.victim_read.layer, l.last_read);
        std::string key = "clobber|" + c.op.op + "|" + c.view + "|" + c.victim + "|" +
                          c.victim_write.op + "|" + c.victim_read.op;
        record_issue(p, std::move(c), key);
      }
    }
  }
  for (auto& intervals : live)
    for (const runfmt::LiveInterval& l : intervals) p.intervals.push_back(l);
  patterns_.push_back(std::move(p));
  int id = static_cast<int>(patterns_.size()) - 1;
  pattern_index_.emplace(hash, id);
  return id;
}

std::vector<runfmt::AccessPattern> AliasTracker::patterns() const {
  std::vector<runfmt::AccessPattern> out;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    runfmt::AccessPattern p;
    p.id = static_cast<int>(i);
    for (const OpKey& k : patterns_[i].ops) p.ops.push_back(runfmt::OpRef{k.op, k.layer});
    p.intervals = patterns_[i].intervals;
    out.push_back(std::move(p));
  }
  return out;
}

void AliasTracker::fill(runfmt::MemoryMap& map) const {
  map.patterns = patterns();
  map.step_patterns = step_patterns_;
  map.violations = violations_;
  map.warnings = warnings_;
  map.violation_count = violation_count_;
  map.warning_count = warning_count_;
  for (const std::string& e : errors_) map.errors.push_back("alias tracker: " + e);
}

}  // namespace lantern::harness
