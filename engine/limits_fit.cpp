// Memory fit of the engine limits (limits_fit.h).
#include "engine/limits_fit.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "kernels/base/errors.h"
#include "engine/engine.h"

namespace lantern {

namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

uint64_t mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}
uint64_t add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}
uint64_t u(int v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

// Elements of one token row across the arena's per-row buffers.
uint64_t row_elements(const ModelConfig& c) {
  // x, xn, o_down: hidden; q_attn: q_dim; k, v: kv_dim; gate, up, mlp_act: intermediate.
  // The fused layout (the default) has qkv (q_dim + 2 kv_dim) instead of k, v
  // and gate_up instead of gate, up: one q_dim more per row, counted here.
  return add(add(mul(3, u(c.hidden_size)), mul(2, mul(u(c.num_q_heads), u(c.head_dim)))),
             add(mul(2, mul(u(c.num_kv_heads), u(c.head_dim))), mul(3, u(c.intermediate_size))));
}

double gib(uint64_t b) { return static_cast<double>(b) / (1ull << 30); }

}  // namespace

uint64_t arena_bytes_needed(const ModelConfig& cfg, const EngineLimits& limits, int act_bytes,
                            int lm_head_parts) {
  const uint64_t a = u(act_bytes);
  const uint64_t rows = u(limits.max_batch_tokens);
  const uint64_t logit_rows = u(limits.logits_rows ? limits.logits_rows : limits.max_seqs);
  uint64_t bytes = mul(mul(rows, row_elements(cfg)), a);
  bytes = add(bytes, mul(mul(logit_rows, u(cfg.hidden_size)), a));  // logits_in
  bytes = add(bytes, mul(mul(logit_rows, u(cfg.vocab_size)), 4));   // logits (f32)
  bytes = add(bytes, mul(rows, 6 * 4));                              // step metadata per row
  bytes = add(bytes, mul(logit_rows, 10 * 4));                       // ... per logit row
  // The pruned last layer's head_x and head_q [R, hidden] / [R, q_dim] (fused layout).
  bytes = add(bytes, mul(mul(logit_rows, add(u(cfg.hidden_size), u(cfg.q_dim()))), a));
  if (lm_head_parts > 0) {  // split LM head: logits_part [R, V/P] and logits_gather [P, R, V/P] f32
    const uint64_t part = mul(mul(logit_rows, u(cfg.vocab_size) / u(lm_head_parts)), 4);
    bytes = add(bytes, mul(part, add(1, u(lm_head_parts))));
  }
  return bytes;
}

void check_limits_fit(const ModelConfig& cfg, const EngineLimits& limits, int act_bytes,
                      uint64_t available, const char* where, int lm_head_parts) {
  // Products model.cpp forms in int must stay in int.
  const int64_t blocks_per_seq =
      (int64_t{limits.max_context} + limits.kv_block_size - 1) / std::max(1, limits.kv_block_size);
  LANTERN_CHECK(int64_t{cfg.num_layers} * blocks_per_seq <= std::numeric_limits<int>::max(),
                "limit max_context=%d with kv_block_size=%d needs %lld KV blocks per sequence "
                "(%d layers): lower max_context or raise kv_block_size",
                limits.max_context, limits.kv_block_size,
                static_cast<long long>(int64_t{cfg.num_layers} * blocks_per_seq), cfg.num_layers);
  const uint64_t need = arena_bytes_needed(cfg, limits, act_bytes, lm_head_parts);
  // Kernels index a [rows, width] buffer with int: rows * width must stay below 2^31.
  const uint64_t index_cap = uint64_t{std::numeric_limits<int>::max()} /
                             std::max<uint64_t>({1, u(cfg.intermediate_size), u(cfg.hidden_size)});
  const bool fits_index = u(limits.max_batch_tokens) <= index_cap;
  const bool fits_memory = available == 0 || need <= available;
  if (fits_index && fits_memory) return;
  // Largest max_batch_tokens that fits, the rest of the arena held fixed.
  EngineLimits none = limits;
  none.max_batch_tokens = 0;
  const uint64_t fixed = arena_bytes_needed(cfg, none, act_bytes, lm_head_parts);
  const uint64_t per_row = std::max<uint64_t>(1, add(mul(row_elements(cfg), u(act_bytes)), 6 * 4));
  uint64_t fits = index_cap;
  if (available) fits = std::min(fits, available > fixed ? (available - fixed) / per_row : 0);
  if (need == kSaturated)
    LANTERN_FAIL("limit max_batch_tokens=%d with max_seqs=%d overflows the activation arena size: "
                 "max_batch_tokens <= %llu fits in %s",
                 limits.max_batch_tokens, limits.max_seqs, static_cast<unsigned long long>(fits),
                 where);
  LANTERN_FAIL("limit max_batch_tokens=%d needs a %.2f GiB activation arena but %s holds %.2f GiB: "
               "max_batch_tokens <= %llu fits (lower --max-batch-tokens or --max-seqs)",
               limits.max_batch_tokens, gib(need), where, gib(available),
               static_cast<unsigned long long>(fits));
}

uint64_t host_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace lantern
