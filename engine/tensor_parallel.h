#pragma once
// Tensor parallelism (Megatron-style), the parts that need no communication:
// which slice of each weight a rank holds, the per-rank model config, and the
// compact serialised step plan rank 0 broadcasts (docs/tensor-parallel.md).
//
//   q/k/v_proj, gate/up_proj   split by output rows: rank r holds heads
//                              [r*Hq/N, (r+1)*Hq/N) (KV heads likewise) and
//                              intermediate rows [r*I/N, (r+1)*I/N)
//   o_proj, down_proj          split by input columns (the same ranges), so
//                              each rank's output is a partial sum: one
//                              all_reduce after each
//   embedding, norms           replicated
//   LM head                    replicated (every rank computes full logits), or
//                              with TpLmHead::split by vocabulary rows: rank r
//                              holds rows [r*V/N, (r+1)*V/N), computes that part
//                              of the logits, and an all_gather assembles them
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"

namespace lantern {

struct StepInput;
struct TensorSpec;

// How the LM head is laid out over the ranks (--tp-lm-head): every rank the
// whole matrix, or each rank V/N vocabulary rows and an all_gather of the
// logits (docs/tensor-parallel.md, "The LM head").
enum class TpLmHead : uint8_t { replicated, split };
const char* tp_lm_head_name(TpLmHead h);
TpLmHead parse_tp_lm_head(const std::string& s);  // throws naming the choices

// This process's place in the tensor-parallel group. world == 1: no sharding.
struct ShardSpec {
  int rank = 0;
  int world = 1;
  TpLmHead lm_head = TpLmHead::replicated;
  bool sharded() const { return world > 1; }
  bool split_lm_head() const { return lm_head == TpLmHead::split; }
};

// Throws a one-line error unless `world` ranks can split the model: world
// must divide num_key_value_heads (so whole KV heads and their GQA groups
// stay on one rank) and intermediate_size, and with a split LM head
// vocab_size; the error lists the N that work.
void check_shardable(const ModelConfig& cfg, int world, TpLmHead lm_head = TpLmHead::replicated);
// The values of N in [1, num_kv_heads] that divide both (and vocab_size
// with a split LM head).
std::vector<int> valid_tp_sizes(const ModelConfig& cfg, TpLmHead lm_head = TpLmHead::replicated);

// The config one rank runs: num_attention_heads, num_key_value_heads and
// intermediate_size divided by world (head_dim, hidden_size, vocabulary
// unchanged: a split LM head gathers full logits rows). Its q_dim/kv_dim are
// the rank's widths of q/k/v.
ModelConfig shard_config(const ModelConfig& cfg, const ShardSpec& shard);

// Where a rank's part of a tensor lies in the full [rows, cols] tensor.
struct TensorSlice {
  enum Kind : uint8_t { whole, rows, cols } kind = whole;
  int64_t begin = 0, count = 0;  // row (kind rows) or column (kind cols) range
};
TensorSlice slice_of(const TensorSpec& spec, const ModelConfig& cfg, const ShardSpec& shard);
// The rank's shape of a tensor of `full_shape` cut by `slice`.
std::vector<int64_t> sliced_shape(const std::vector<int64_t>& full_shape, const TensorSlice& slice);

// The step plan rank 0 broadcasts: every field of StepInput, little-endian
// length-prefixed arrays. decode_step throws on a malformed message.
std::vector<uint8_t> encode_step(const StepInput& in);
StepInput decode_step(const std::vector<uint8_t>& bytes);

}  // namespace lantern
