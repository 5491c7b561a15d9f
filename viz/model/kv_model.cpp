#include "viz/model/kv_model.h"

#include <algorithm>
#include <unordered_map>

namespace lantern::view {

namespace {

bool in_pool(const runfmt::KvData& kv, int32_t block) { return block >= 0 && block < kv.total_blocks; }

}  // namespace

KvHeatmap bin_kv(const runfmt::KvData& kv, int max_block_bins, int max_step_bins) {
  KvHeatmap h;
  for (const auto& s : kv.steps) h.steps.push_back(s.step);
  if (kv.total_blocks <= 0 || h.steps.empty() || max_block_bins <= 0 || max_step_bins <= 0) return h;
  const int nsteps = static_cast<int>(h.steps.size());
  h.blocks_per_bin = (kv.total_blocks + max_block_bins - 1) / max_block_bins;
  h.block_bins = (kv.total_blocks + h.blocks_per_bin - 1) / h.blocks_per_bin;
  h.steps_per_bin = (nsteps + max_step_bins - 1) / max_step_bins;
  h.step_bins = (nsteps + h.steps_per_bin - 1) / h.steps_per_bin;
  h.used.assign(static_cast<size_t>(h.block_bins) * h.step_bins, 0.f);
  h.owner.assign(h.used.size(), -1);

  std::vector<int64_t> owner(kv.total_blocks, -1);
  std::vector<int> used_in_bin(h.block_bins, 0);
  // Per block bin: blocks held per sequence (the dominant one colours the cell).
  std::vector<std::unordered_map<int64_t, int>> seqs_in_bin(h.block_bins);
  size_t e = 0;
  for (int c = 0; c < nsteps; ++c) {
    for (; e < kv.events.size() && kv.events[e].step <= h.steps[c]; ++e) {
      const runfmt::KvEventRecord& ev = kv.events[e];
      if (!in_pool(kv, ev.block)) continue;
      const int bin = ev.block / h.blocks_per_bin;
      if (ev.kind == 0 && owner[ev.block] < 0) {
        owner[ev.block] = ev.seq;
        ++used_in_bin[bin];
        ++seqs_in_bin[bin][ev.seq];
      } else if (ev.kind == 1 && owner[ev.block] >= 0) {
        auto it = seqs_in_bin[bin].find(owner[ev.block]);
        if (it != seqs_in_bin[bin].end() && --it->second == 0) seqs_in_bin[bin].erase(it);
        owner[ev.block] = -1;
        --used_in_bin[bin];
      }
    }
    const bool last_of_bin = (c + 1) % h.steps_per_bin == 0 || c + 1 == nsteps;
    if (!last_of_bin) continue;
    const int col = c / h.steps_per_bin;
    for (int b = 0; b < h.block_bins; ++b) {
      const int bin_blocks = std::min(h.blocks_per_bin, kv.total_blocks - b * h.blocks_per_bin);
      const size_t cell = static_cast<size_t>(col) * h.block_bins + b;
      h.used[cell] = static_cast<float>(used_in_bin[b]) / static_cast<float>(bin_blocks);
      int best = 0;
      for (const auto& [seq, n] : seqs_in_bin[b])
        if (n > best || (n == best && seq < h.owner[cell])) best = n, h.owner[cell] = seq;
    }
  }
  return h;
}

std::vector<int64_t> owners_at(const runfmt::KvData& kv, int64_t step) {
  std::vector<int64_t> owner(std::max(kv.total_blocks, 0), -1);
  for (const auto& ev : kv.events) {
    if (ev.step > step) break;
    if (!in_pool(kv, ev.block)) continue;
    owner[ev.block] = ev.kind == 0 ? ev.seq : -1;
  }
  return owner;
}

std::map<int64_t, std::map<int, std::vector<int32_t>>> block_tables_at(const runfmt::KvData& kv,
                                                                       int64_t step) {
  std::map<int64_t, std::map<int, std::vector<int32_t>>> tables;
  for (const auto& ev : kv.events) {
    if (ev.step > step) break;
    auto& blocks = tables[ev.seq][ev.layer];
    if (ev.kind == 0) {
      blocks.push_back(ev.block);
    } else {
      auto it = std::find(blocks.begin(), blocks.end(), ev.block);
      if (it != blocks.end()) blocks.erase(it);
    }
  }
  for (auto it = tables.begin(); it != tables.end();) {
    for (auto l = it->second.begin(); l != it->second.end();)
      l = l->second.empty() ? it->second.erase(l) : std::next(l);
    it = it->second.empty() ? tables.erase(it) : std::next(it);
  }
  return tables;
}

std::vector<SeqEvent> sequence_events(const runfmt::KvData& kv) {
  std::vector<SeqEvent> out;
  std::unordered_map<int64_t, int> held;
  std::unordered_map<int64_t, size_t> last_drop;  // seq -> index in out of its latest drop
  for (size_t i = 0; i < kv.events.size(); ++i) {
    const auto& ev = kv.events[i];
    int& n = held[ev.seq];
    if (ev.kind == 0) {
      if (n == 0) {
        if (auto it = last_drop.find(ev.seq); it != last_drop.end()) {
          out[it->second].kind = SeqEvent::preempt;  // dropped, then came back
          last_drop.erase(it);
        }
        out.push_back({SeqEvent::admit, ev.step, ev.seq});
      }
      ++n;
    } else if (n > 0 && --n == 0) {
      // Several frees of one step drop a sequence once: the step's last wins.
      last_drop[ev.seq] = out.size();
      out.push_back({SeqEvent::finish, ev.step, ev.seq});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const SeqEvent& a, const SeqEvent& b) { return a.step < b.step; });
  return out;
}

}  // namespace lantern::view
