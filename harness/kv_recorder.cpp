#include "harness/kv_recorder.h"

#include <algorithm>

#include "kernels/base/errors.h"

namespace lantern::harness {

KvRecorder::KvRecorder(uint64_t (*clock)()) : clock_(clock) { events_.reserve(1 << 14); }

void KvRecorder::error(std::string message) {
  if (errors_.size() < 100) errors_.push_back(std::move(message));
}

void KvRecorder::on_kv_event(const KvEvent& e) {
  events_.push_back(runfmt::KvEventRecord{e.step, e.seq, e.block, static_cast<int16_t>(e.layer),
                                          static_cast<uint8_t>(e.kind == KvEvent::free), 0});
  if (e.kind == KvEvent::alloc) {
    auto [it, inserted] = held_.emplace(e.block, Holder{e.seq, e.layer});
    if (!inserted) {
      error(strformat("step %lld: block %d allocated to sequence %lld layer %d while sequence "
                      "%lld layer %d holds it",
                      static_cast<long long>(e.step), e.block, static_cast<long long>(e.seq),
                      e.layer, static_cast<long long>(it->second.seq), it->second.layer));
      return;
    }
    blocks_of_seq_[e.seq] += 1;
    if (static_cast<int>(held_.size()) > peak_used_) {
      peak_used_ = static_cast<int>(held_.size());
      peak_step_ = e.step;
    }
    if (total_blocks_ > 0 && static_cast<int>(held_.size()) > total_blocks_)
      error(strformat("step %lld: %zu blocks held but the pool has %d",
                      static_cast<long long>(e.step), held_.size(), total_blocks_));
    return;
  }
  auto it = held_.find(e.block);
  if (it == held_.end()) {
    error(strformat("step %lld: sequence %lld layer %d frees block %d, which nobody holds",
                    static_cast<long long>(e.step), static_cast<long long>(e.seq), e.layer,
                    e.block));
    return;
  }
  if (it->second.seq != e.seq || it->second.layer != e.layer)
    error(strformat("step %lld: sequence %lld layer %d frees block %d held by sequence %lld "
                    "layer %d",
                    static_cast<long long>(e.step), static_cast<long long>(e.seq), e.layer,
                    e.block, static_cast<long long>(it->second.seq), it->second.layer));
  auto owner = blocks_of_seq_.find(it->second.seq);
  if (owner != blocks_of_seq_.end() && --owner->second == 0) blocks_of_seq_.erase(owner);
  held_.erase(it);
}

KvRecorder::Snapshot KvRecorder::snapshot(int64_t step) const {
  Snapshot s;
  s.t_ns = clock_();
  runfmt::KvStepRecord& r = s.record;
  r.step = step;
  r.used_blocks = static_cast<int>(held_.size());
  r.total_blocks = total_blocks_;
  r.free_blocks = total_blocks_ > 0 ? total_blocks_ - r.used_blocks : 0;
  r.used_token_slots = -1;
  r.wasted_token_slots = -1;
  r.num_seqs = static_cast<int>(blocks_of_seq_.size());
  r.blocks_per_seq.assign(blocks_of_seq_.begin(), blocks_of_seq_.end());
  std::sort(r.blocks_per_seq.begin(), r.blocks_per_seq.end());
  return s;
}

void KvRecorder::on_step_end(const StepInfo& s) {
  if (!snapshots_.empty() && snapshots_.back().record.step == s.step) return;  // engine stats came
  snapshots_.push_back(snapshot(s.step));
}

void KvRecorder::on_kv_step(const KvStepStats& s) {
  if (s.total_blocks > 0) total_blocks_ = s.total_blocks;
  Snapshot snap = snapshot(s.step);
  runfmt::KvStepRecord& r = snap.record;
  if (s.used_blocks != r.used_blocks)
    error(strformat("step %lld: the engine reports %d used blocks but its alloc/free events "
                    "leave %d held",
                    static_cast<long long>(s.step), s.used_blocks, r.used_blocks));
  if (s.total_blocks > 0 && s.free_blocks != r.free_blocks)
    error(strformat("step %lld: the engine reports %d free blocks, events imply %d",
                    static_cast<long long>(s.step), s.free_blocks, r.free_blocks));
  r.used_token_slots = s.used_token_slots;
  r.wasted_token_slots = s.wasted_token_slots;
  const int64_t slots = s.used_token_slots + s.wasted_token_slots;
  r.fragmentation = slots > 0 ? static_cast<double>(s.wasted_token_slots) / slots : 0.0;
  if (!snapshots_.empty() && snapshots_.back().record.step == s.step)
    snapshots_.back() = std::move(snap);
  else
    snapshots_.push_back(std::move(snap));
}

runfmt::KvData KvRecorder::data(uint64_t origin_ns) const {
  runfmt::KvData d;
  d.block_size = block_size_;
  d.total_blocks = total_blocks_;
  d.events = events_;
  for (const Snapshot& s : snapshots_) {
    runfmt::KvStepRecord r = s.record;
    r.t_us = s.t_ns >= origin_ns ? static_cast<double>(s.t_ns - origin_ns) / 1000.0 : 0.0;
    d.steps.push_back(std::move(r));
  }
  d.peak_used_blocks = peak_used_;
  d.peak_step = peak_step_;
  for (const auto& [block, holder] : held_) d.leaked_blocks.push_back(block);
  std::sort(d.leaked_blocks.begin(), d.leaked_blocks.end());
  d.errors = errors_;
  if (!d.leaked_blocks.empty())
    d.errors.push_back(strformat("%zu blocks were still held when the run ended (first: block %d)",
                                 d.leaked_blocks.size(), d.leaked_blocks.front()));
  return d;
}

}  // namespace lantern::harness
