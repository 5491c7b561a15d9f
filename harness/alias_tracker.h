#pragma once
// AliasTracker: verifies the arena's alias plan at run time.
//
// Every launch declares the arena views it reads and writes. Within a step a
// view is live from a write until the last read before its next write. A
// write at op N into bytes of view A clobbers view B (B != A, overlapping
// bytes) when B holds a value written before op N that some op after N still
// reads. Reading and writing aliased views in the same op (in-place, e.g.
// attention reading q and writing attn_out over it) is allowed. A read of a
// view that nothing wrote earlier in the step is reported as a "stale_read"
// warning.
//
// Ops recorded into a CUDA graph (OpInfo::kCapture) are skipped: the graph's
// replays report the same accesses (OpInfo::kReplay) when they really run.
//
// Hot path: on_op_begin appends the op's accesses to the step's log. At
// on_step_end the log is matched against the access patterns already seen
// (decode steps repeat one pattern); only a new pattern is analysed. A step
// that only replays a CUDA graph whose pattern is known costs a map lookup.
#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/observer.h"
#include "harness/runfmt/records.h"

namespace lantern::harness {

struct TrackedView {
  std::string name;
  uint64_t begin = 0, end = 0;  // byte range inside the arena allocation
};

class AliasTracker : public Observer {
 public:
  void on_arena(const Arena& arena) override;
  void on_step_begin(const StepInfo& s) override;
  void on_step_end(const StepInfo& s) override;
  void on_op_begin(const OpInfo& op) override;
  // A step that is one graph replay and nothing else reuses the pattern of
  // the graph's first such step without logging its ops again.
  void on_graph_replay(const GraphReplay& g) override;

  // Declares the views directly (tests; on_arena does this from the arena).
  void set_views(std::vector<TrackedView> views);
  // Analyses ops logged outside any step (as step -1). Call once at the end.
  void finish();

  int64_t violation_count() const { return violation_count_; }
  int64_t warning_count() const { return warning_count_; }
  // Distinct issues (deduplicated over layers and steps), first occurrence kept.
  const std::vector<runfmt::AliasIssue>& violations() const { return violations_; }
  const std::vector<runfmt::AliasIssue>& warnings() const { return warnings_; }
  const std::vector<std::string>& errors() const { return errors_; }
  // Access patterns and which pattern each analysed step had.
  std::vector<runfmt::AccessPattern> patterns() const;
  const std::vector<std::pair<int64_t, int>>& step_patterns() const { return step_patterns_; }
  // Writes views, patterns and issues into a memory map.
  void fill(runfmt::MemoryMap& map) const;

 private:
  struct OpKey {
    const char* op;
    int32_t layer;
    bool operator==(const OpKey&) const = default;
  };
  struct Access {
    int32_t op_index;
    int32_t view;
    int32_t write;  // 0 read, 1 write
    bool operator==(const Access&) const = default;
  };
  static_assert(sizeof(Access) == 12);
  struct Pattern {
    std::vector<OpKey> ops;
    std::vector<Access> accesses;
    std::vector<runfmt::LiveInterval> intervals;
    std::vector<size_t> issues;      // indices into issue_table_
    std::vector<int64_t> issue_hits; // occurrences of each issue within one step
  };
  struct IssueRef {
    bool violation;
    size_t index;  // into violations_ / warnings_
  };

  std::vector<TrackedView> views_;
  std::vector<std::vector<int>> overlaps_;  // view -> views sharing bytes with it
  std::vector<OpKey> ops_;
  std::vector<Access> accesses_;
  int64_t step_ = -1;
  bool in_step_ = false;

  // Graph replays: (ops pointer, count) -> pattern of a pure-replay step.
  std::map<std::pair<const OpInfo*, int>, int> graph_patterns_;
  GraphReplay pending_replay_;   // this step's replay, not yet expanded into ops_
  bool replay_pending_ = false;
  std::pair<const OpInfo*, int> learn_key_{nullptr, 0};  // step that will teach a graph's pattern
  bool expanding_ = false;  // on_op_begin called from a replay's expansion
  void expand(const GraphReplay& g);
  void expand_pending_replay();

  std::vector<Pattern> patterns_;
  std::unordered_multimap<uint64_t, int> pattern_index_;  // hash -> pattern id
  std::vector<std::pair<int64_t, int>> step_patterns_;
  std::vector<IssueRef> issue_table_;
  std::unordered_map<std::string, size_t> issue_by_key_;
  std::vector<runfmt::AliasIssue> violations_, warnings_;
  int64_t violation_count_ = 0, warning_count_ = 0;
  std::vector<std::string> errors_;

  void close_step();
  int find_or_analyse(int64_t step);
  int analyse(uint64_t hash, int64_t step);
  void record_issue(Pattern& p, runfmt::AliasIssue issue, const std::string& key);
  const std::string& view_name(int v) const;
};

}  // namespace lantern::harness
