#pragma once
// Paged KV cache bookkeeping (host only, no CUDA): a free-block stack and one
// block table per (sequence slot, layer), as in the seed engine. The device
// copy of the tables is updated incrementally from the entries this class
// hands out (take_table_updates), never re-uploaded whole.
#include <cstdint>
#include <vector>

#include "engine/observer.h"

namespace lantern {

struct KvTableUpdate {
  int32_t index;  // flat index into tables [layers][max_seqs][max_blocks_per_seq]
  int32_t block;  // physical block id
};

class KvBlockManager {
 public:
  KvBlockManager(int num_blocks, int block_size, int num_layers, int max_seqs,
                 int max_blocks_per_seq, Observer* observer = nullptr);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return static_cast<int>(free_stack_.size()); }
  int max_blocks_per_seq() const { return max_blocks_per_seq_; }

  // Blocks (all layers together) that growing `slot` to `tokens` would take.
  int blocks_to_grow(int slot, int tokens) const;
  bool can_grow(int slot, int tokens) const { return blocks_to_grow(slot, tokens) <= free_blocks(); }
  // Allocate blocks so `slot` holds `tokens` tokens in every layer. Throws if
  // the pool is short (callers check can_grow first: admission control).
  void grow(int slot, int64_t seq_id, int tokens, int64_t step);
  // Return every block of the slot to the pool.
  void release(int slot, int64_t seq_id, int64_t step);
  int tokens(int slot) const { return tokens_[slot]; }
  int blocks_of(int slot) const;  // all layers

  std::vector<KvTableUpdate> take_table_updates();
  const std::vector<int32_t>& host_tables() const { return tables_; }  // -1 = unmapped
  size_t table_entries() const { return tables_.size(); }

  KvStepStats stats(int64_t step) const;

 private:
  int num_blocks_, block_size_, num_layers_, max_seqs_, max_blocks_per_seq_;
  Observer* observer_;
  std::vector<int32_t> free_stack_;  // top = back
  std::vector<int32_t> tables_;      // [layers][max_seqs][max_blocks_per_seq]
  std::vector<int> blocks_per_layer_;  // [max_seqs] mapped blocks in each layer
  std::vector<int> tokens_;            // [max_seqs]
  std::vector<KvTableUpdate> pending_;
  int32_t& entry(int layer, int slot, int i) {
    return tables_[(static_cast<size_t>(layer) * max_seqs_ + slot) * max_blocks_per_seq_ + i];
  }
};

}  // namespace lantern
