#pragma once
// KvRecorder: every KV block alloc/free (step, sequence, layer) and, per
// step, the pool's occupancy: used / free blocks, blocks per sequence and
// internal fragmentation (unused token slots in partly filled last blocks,
// as the engine reports them in KvStepStats).
//
// It keeps its own ledger of held blocks from the events and checks it:
// a block allocated twice, a free of a block nobody holds, an engine
// used-block count that disagrees with the events, and blocks still held at
// the end are all reported as errors, never ignored.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/observer.h"
#include "harness/runfmt/records.h"

namespace lantern::harness {

class KvRecorder : public Observer {
 public:
  explicit KvRecorder(uint64_t (*clock)());

  void on_step_end(const StepInfo& s) override;
  void on_kv_event(const KvEvent& e) override;
  void on_kv_step(const KvStepStats& s) override;
  void on_graph_replay(const GraphReplay&) override {}  // no op hooks needed

  void set_block_size(int tokens) { block_size_ = tokens; }
  void set_total_blocks(int blocks) { total_blocks_ = blocks; }

  int used_blocks() const { return static_cast<int>(held_.size()); }
  int peak_used_blocks() const { return peak_used_; }
  // The recorded data; steps' times are made relative to `origin_ns`. Blocks
  // still held are listed as leaked (call when the engine is idle).
  runfmt::KvData data(uint64_t origin_ns) const;

 private:
  struct Holder {
    int64_t seq;
    int32_t layer;
  };
  struct Snapshot {
    runfmt::KvStepRecord record;
    uint64_t t_ns = 0;
  };
  uint64_t (*clock_)();
  int block_size_ = 0;
  int total_blocks_ = 0;
  std::vector<runfmt::KvEventRecord> events_;
  std::unordered_map<int, Holder> held_;          // block -> holder
  std::unordered_map<int64_t, int> blocks_of_seq_;  // seq -> held blocks (all layers)
  std::vector<Snapshot> snapshots_;
  int peak_used_ = 0;
  int64_t peak_step_ = -1;
  std::vector<std::string> errors_;

  Snapshot snapshot(int64_t step) const;
  void error(std::string message);
};

}  // namespace lantern::harness
