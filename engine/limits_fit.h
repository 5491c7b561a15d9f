#pragma once
// Does a set of limits fit in memory? Sizes computed in 64 bits with checked
// products before anything is allocated, so a hostile --max-batch-tokens
// (2147483647) is refused with what would fit instead of wrapping into a
// bogus arena size and a double free.
#include <cstdint>

#include "engine/config.h"

namespace lantern {

struct EngineLimits;

// Bytes the activation arena needs for `limits` (model.cpp's buffers: x, xn,
// q, k, v, o, gate, up, act per token row; logits rows; step metadata), in
// `act_bytes` per activation element (2 on cuda, 4 on cpu). `lm_head_parts`
// > 0: the LM head is split by vocabulary over that many ranks (--tp-lm-head
// split), which adds this rank's logits part [logits rows, V/parts] and the
// all_gather's scratch [parts, logits rows, V/parts] (f32, op_table.h) to
// the full logits rows. Saturates at UINT64_MAX instead of wrapping.
uint64_t arena_bytes_needed(const ModelConfig& cfg, const EngineLimits& limits, int act_bytes,
                            int lm_head_parts = 0);

// Throws naming the limit, the bytes it needs, the bytes `available`, and the
// largest max_batch_tokens that would fit. `where` names the memory
// ("device memory free after the weights", "host memory").
void check_limits_fit(const ModelConfig& cfg, const EngineLimits& limits, int act_bytes,
                      uint64_t available, const char* where, int lm_head_parts = 0);

// Physical host memory in bytes (sysconf), 0 when unknown.
uint64_t host_memory_bytes();

}  // namespace lantern
