// EngineLimits (validation and their JSON form) and MemoryBudget's table and
// JSON (engine/engine.h).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "kernels/base/errors.h"

namespace lantern {

void EngineLimits::validate(const ModelConfig& cfg) const {
  LANTERN_CHECK(max_batch_tokens > 0, "limit max_batch_tokens=%d must be > 0", max_batch_tokens);
  LANTERN_CHECK(max_seqs > 0, "limit max_seqs=%d must be > 0", max_seqs);
  LANTERN_CHECK(max_seqs <= max_batch_tokens,
                "limit max_seqs=%d exceeds max_batch_tokens=%d: every running sequence needs a row "
                "per step; raise max_batch_tokens",
                max_seqs, max_batch_tokens);
  LANTERN_CHECK(max_context > 1, "limit max_context=%d must be > 1", max_context);
  LANTERN_CHECK(cfg.max_position_embeddings <= 0 || max_context <= cfg.max_position_embeddings,
                "limit max_context=%d exceeds the model's max_position_embeddings=%d: lower max_context",
                max_context, cfg.max_position_embeddings);
  LANTERN_CHECK(kv_block_size > 0 && kv_block_size <= 1024, "limit kv_block_size=%d must be in [1, 1024]",
                kv_block_size);
  LANTERN_CHECK(kv_num_blocks >= 0, "limit kv_num_blocks=%d must be >= 0 (0 = automatic)", kv_num_blocks);
  LANTERN_CHECK(kv_memory_fraction > 0 && kv_memory_fraction <= 1,
                "limit kv_memory_fraction=%g must be in (0, 1]", kv_memory_fraction);
  LANTERN_CHECK(max_queue > 0, "limit max_queue=%d must be > 0", max_queue);
  LANTERN_CHECK(logits_rows >= 0, "limit logits_rows=%d must be >= 0 (0 = max_seqs)", logits_rows);
}

nlohmann::json EngineLimits::to_json() const {
  return {{"max_batch_tokens", max_batch_tokens}, {"max_seqs", max_seqs},
          {"max_context", max_context},           {"kv_block_size", kv_block_size},
          {"kv_num_blocks", kv_num_blocks},       {"kv_memory_fraction", kv_memory_fraction},
          {"max_queue", max_queue},               {"logits_rows", logits_rows}};
}

EngineLimits EngineLimits::from_json(const nlohmann::json& j) {
  LANTERN_CHECK(j.is_object(), "limits must be a JSON object, got %s", j.type_name());
  EngineLimits l;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    auto num = [&](auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      const std::string shown = it->dump().substr(0, 60);
      if constexpr (std::is_integral_v<T>) {
        // Full range first: 4294967297 must not wrap to 1.
        LANTERN_CHECK(it->is_number_integer() && !(it->is_number_unsigned() && it->get<uint64_t>() > INT32_MAX) &&
                          it->get<int64_t>() >= INT32_MIN && it->get<int64_t>() <= INT32_MAX,
                      "limits.%s must be an integer in [%d, %d], got %s", k.c_str(), INT32_MIN, INT32_MAX,
                      shown.c_str());
        field = static_cast<T>(it->get<int64_t>());
      } else {
        LANTERN_CHECK(it->is_number(), "limits.%s must be a number, got %s", k.c_str(), shown.c_str());
        field = it->get<T>();
      }
    };
    if (k == "max_batch_tokens") num(l.max_batch_tokens);
    else if (k == "max_seqs") num(l.max_seqs);
    else if (k == "max_context") num(l.max_context);
    else if (k == "kv_block_size") num(l.kv_block_size);
    else if (k == "kv_num_blocks") num(l.kv_num_blocks);
    else if (k == "kv_memory_fraction") num(l.kv_memory_fraction);
    else if (k == "max_queue") num(l.max_queue);
    else if (k == "logits_rows") num(l.logits_rows);
    else
      LANTERN_FAIL("unknown limit '%s': valid limits are max_batch_tokens, max_seqs, max_context, "
                   "kv_block_size, kv_num_blocks, kv_memory_fraction, max_queue, logits_rows",
                   k.c_str());
  }
  return l;
}

std::string MemoryBudget::table() const {
  auto mib = [](size_t b) { return b / 1048576.0; };
  std::string s;
  s += strformat("  %-14s %10.1f MiB\n", "weights", mib(weights));
  s += strformat("  %-14s %10.1f MiB\n", "arena", mib(arena));
  s += strformat("  %-14s %10.1f MiB  (%d blocks%s)\n", "kv_pool", mib(kv_pool), kv_blocks,
                 kv_scratch_blocks ? " + 1 scratch" : "");
  s += strformat("  %-14s %10.1f MiB\n", "block_tables", mib(block_tables));
  s += strformat("  %-14s %10.1f MiB\n", "workspace", mib(workspace));
  if (cuda_graph_count)
    s += strformat("  %-14s %10.1f MiB  (%d decode + %d prefill graphs)\n", "cuda_graphs", mib(cuda_graphs),
                   cuda_graph_count - prefill_graph_count, prefill_graph_count);
  s += strformat("  %-14s %10.1f MiB\n", "total", mib(total()));
  return s;
}

nlohmann::json MemoryBudget::to_json() const {
  return {{"weights", weights},
          {"arena", arena},
          {"kv_pool", kv_pool},
          {"kv_blocks", kv_blocks},
          {"kv_scratch_blocks", kv_scratch_blocks},
          {"workspace", workspace},
          {"block_tables", block_tables},
          {"cuda_graphs", cuda_graphs},
          {"cuda_graph_count", cuda_graph_count},
          {"prefill_graph_count", prefill_graph_count},
          {"total", total()}};
}

}  // namespace lantern
