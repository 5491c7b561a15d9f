#include "engine/kv_cache.h"

#include "kernels/base/errors.h"

namespace lantern {

KvBlockManager::KvBlockManager(int num_blocks, int block_size, int num_layers, int max_seqs,
                               int max_blocks_per_seq, Observer* observer)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      num_layers_(num_layers),
      max_seqs_(max_seqs),
      max_blocks_per_seq_(max_blocks_per_seq),
      observer_(observer),
      tables_(static_cast<size_t>(num_layers) * max_seqs * max_blocks_per_seq, -1),
      blocks_per_layer_(max_seqs, 0),
      tokens_(max_seqs, 0) {
  LANTERN_ASSERT(num_blocks > 0 && block_size > 0 && num_layers > 0 && max_seqs > 0, "bad kv shape");
  free_stack_.reserve(num_blocks);
  // Lowest ids on top so allocation order is easy to read in traces.
  for (int b = num_blocks - 1; b >= 0; --b) free_stack_.push_back(b);
}

int KvBlockManager::blocks_to_grow(int slot, int tokens) const {
  int need = (tokens + block_size_ - 1) / block_size_;
  int have = blocks_per_layer_[slot];
  return need > have ? (need - have) * num_layers_ : 0;
}

int KvBlockManager::blocks_of(int slot) const { return blocks_per_layer_[slot] * num_layers_; }

void KvBlockManager::grow(int slot, int64_t seq_id, int tokens, int64_t step) {
  LANTERN_ASSERT(slot >= 0 && slot < max_seqs_, "slot %d out of range", slot);
  int need = (tokens + block_size_ - 1) / block_size_;
  LANTERN_CHECK(need <= max_blocks_per_seq_,
                "sequence %lld needs %d KV blocks per layer for %d tokens but max_context allows "
                "%d: raise max_context",
                static_cast<long long>(seq_id), need, tokens, max_blocks_per_seq_);
  int extra = blocks_to_grow(slot, tokens);
  LANTERN_ASSERT(extra <= free_blocks(), "KV pool short: need %d blocks, %d free (admission control "
                 "must check can_grow first)", extra, free_blocks());
  for (int i = blocks_per_layer_[slot]; i < need; ++i) {
    for (int layer = 0; layer < num_layers_; ++layer) {
      int32_t b = free_stack_.back();
      free_stack_.pop_back();
      entry(layer, slot, i) = b;
      int32_t flat = static_cast<int32_t>((static_cast<size_t>(layer) * max_seqs_ + slot) *
                                              max_blocks_per_seq_ + i);
      pending_.push_back({flat, b});
      LANTERN_OBSERVE(observer_, on_kv_event(KvEvent{KvEvent::alloc, step, b, seq_id, layer}));
    }
  }
  blocks_per_layer_[slot] = std::max(blocks_per_layer_[slot], need);
  tokens_[slot] = std::max(tokens_[slot], tokens);
}

void KvBlockManager::release(int slot, int64_t seq_id, int64_t step) {
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int i = 0; i < blocks_per_layer_[slot]; ++i) {
      int32_t& e = entry(layer, slot, i);
      free_stack_.push_back(e);
      LANTERN_OBSERVE(observer_, on_kv_event(KvEvent{KvEvent::free, step, e, seq_id, layer}));
      e = -1;  // the device table keeps the stale id; nothing reads past context_len
    }
  }
  blocks_per_layer_[slot] = 0;
  tokens_[slot] = 0;
}

std::vector<KvTableUpdate> KvBlockManager::take_table_updates() {
  std::vector<KvTableUpdate> out;
  out.swap(pending_);
  return out;
}

KvStepStats KvBlockManager::stats(int64_t step) const {
  KvStepStats s;
  s.step = step;
  s.total_blocks = num_blocks_;
  s.free_blocks = free_blocks();
  s.used_blocks = num_blocks_ - s.free_blocks;
  for (int slot = 0; slot < max_seqs_; ++slot) {
    if (blocks_per_layer_[slot] == 0) continue;
    ++s.num_seqs;
    s.used_token_slots += static_cast<int64_t>(tokens_[slot]) * num_layers_;
    s.wasted_token_slots +=
        static_cast<int64_t>(blocks_per_layer_[slot] * block_size_ - tokens_[slot]) * num_layers_;
  }
  return s;
}

}  // namespace lantern
