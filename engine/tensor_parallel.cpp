#include "engine/tensor_parallel.h"

#include <cstring>

#include "engine/model.h"
#include "engine/weights.h"
#include "kernels/base/errors.h"

namespace lantern {

const char* tp_lm_head_name(TpLmHead h) {
  return h == TpLmHead::split ? "split" : "replicated";
}

TpLmHead parse_tp_lm_head(const std::string& s) {
  if (s == "replicated") return TpLmHead::replicated;
  if (s == "split") return TpLmHead::split;
  LANTERN_FAIL("--tp-lm-head '%s': use replicated (every rank the whole LM head) or split "
               "(vocabulary rows per rank, an all_gather of the logits)",
               s.c_str());
}

namespace {

bool divides(const ModelConfig& cfg, int n, TpLmHead lm_head) {
  return n >= 1 && cfg.num_kv_heads % n == 0 && cfg.intermediate_size % n == 0 &&
         (lm_head != TpLmHead::split || cfg.vocab_size % n == 0);
}

}  // namespace

std::vector<int> valid_tp_sizes(const ModelConfig& cfg, TpLmHead lm_head) {
  std::vector<int> ok;
  for (int n = 1; n <= cfg.num_kv_heads; ++n)
    if (divides(cfg, n, lm_head)) ok.push_back(n);
  return ok;
}

void check_shardable(const ModelConfig& cfg, int world, TpLmHead lm_head) {
  if (divides(cfg, world, lm_head)) return;
  std::string ok;
  for (int n : valid_tp_sizes(cfg, lm_head)) ok += (ok.empty() ? "" : ", ") + std::to_string(n);
  if (divides(cfg, world, TpLmHead::replicated))  // only the vocabulary split is in the way
    LANTERN_FAIL(
        "--tp %d --tp-lm-head split cannot split this model's vocabulary: N must divide "
        "vocab_size=%d; use --tp one of %s, or --tp-lm-head replicated",
        world, cfg.vocab_size, ok.c_str());
  LANTERN_FAIL(
      "--tp %d cannot split this model: N must divide num_key_value_heads=%d and "
      "intermediate_size=%d%s; use --tp one of %s",
      world, cfg.num_kv_heads, cfg.intermediate_size,
      lm_head == TpLmHead::split ? strformat(" (and vocab_size=%d: --tp-lm-head split)", cfg.vocab_size).c_str() : "",
      ok.c_str());
}

ModelConfig shard_config(const ModelConfig& cfg, const ShardSpec& shard) {
  check_shardable(cfg, shard.world);
  LANTERN_CHECK(shard.rank >= 0 && shard.rank < shard.world,
                "tensor-parallel rank %d outside [0, %d)", shard.rank, shard.world);
  ModelConfig c = cfg;
  c.num_q_heads /= shard.world;  // num_q_heads is a multiple of num_kv_heads (validate)
  c.num_kv_heads /= shard.world;
  c.intermediate_size /= shard.world;
  return c;
}

TensorSlice slice_of(const TensorSpec& spec, const ModelConfig& cfg, const ShardSpec& shard) {
  TensorSlice s;
  if (!shard.sharded()) return s;
  const int64_t q = cfg.q_dim() / shard.world, kv = cfg.kv_dim() / shard.world,
                inter = cfg.intermediate_size / shard.world, vocab = cfg.vocab_size / shard.world;
  auto cut = [&](TensorSlice::Kind k, int64_t width) {
    s.kind = k;
    s.begin = shard.rank * width;
    s.count = width;
  };
  switch (spec.role) {
    case TensorRole::wq:
      cut(TensorSlice::rows, q);
      break;
    case TensorRole::wk:
    case TensorRole::wv:
      cut(TensorSlice::rows, kv);
      break;
    case TensorRole::w_gate:
    case TensorRole::w_up:
      cut(TensorSlice::rows, inter);
      break;
    case TensorRole::wo:
      cut(TensorSlice::cols, q);
      break;
    case TensorRole::w_down:
      cut(TensorSlice::cols, inter);
      break;
    case TensorRole::lm_head:  // untied checkpoints; a tied head is a view of the embedding
      if (shard.split_lm_head()) cut(TensorSlice::rows, vocab);
      break;
    default:
      break;  // embedding, norms: replicated
  }
  return s;
}

std::vector<int64_t> sliced_shape(const std::vector<int64_t>& full, const TensorSlice& slice) {
  std::vector<int64_t> s = full;
  if (slice.kind == TensorSlice::rows) s[0] = slice.count;
  if (slice.kind == TensorSlice::cols) s[1] = slice.count;
  return s;
}

// ---- the step plan on the wire
namespace {

struct Writer {
  std::vector<uint8_t> out;
  void raw(const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    const uint64_t n = v.size();
    raw(&n, 8);
    if (n) raw(v.data(), n * sizeof(T));
  }
};

struct Reader {
  const std::vector<uint8_t>& in;
  size_t at = 0;
  void raw(void* p, size_t n) {
    LANTERN_CHECK(n <= in.size() - at,
                  "tensor-parallel step plan truncated (%zu bytes, need %zu more at %zu)",
                  in.size(), n, at);
    std::memcpy(p, in.data() + at, n);
    at += n;
  }
  template <class T>
  void vec(std::vector<T>& v) {
    uint64_t n = 0;
    raw(&n, 8);
    LANTERN_CHECK(n <= (in.size() - at) / sizeof(T),
                  "tensor-parallel step plan: array of %llu elements "
                  "does not fit the %zu-byte message",
                  static_cast<unsigned long long>(n), in.size());
    v.resize(n);
    if (n) raw(v.data(), n * sizeof(T));
  }
};

constexpr uint32_t kPlanMagic = 0x4c545031;  // "LTP1"

}  // namespace

std::vector<uint8_t> encode_step(const StepInput& in) {
  Writer w;
  w.raw(&kPlanMagic, 4);
  const int32_t max_fresh = in.max_fresh_len;
  const uint8_t copy = in.copy_logits ? 1 : 0;
  w.raw(&max_fresh, 4);
  w.raw(&copy, 1);
  w.vec(in.tokens);
  w.vec(in.positions);
  w.vec(in.slots);
  w.vec(in.fresh_starts);
  w.vec(in.logit_rows);
  w.vec(in.temperature);
  w.vec(in.top_p);
  w.vec(in.top_k);
  w.vec(in.gen_index);
  w.vec(in.seeds);
  w.vec(in.table_updates);
  return std::move(w.out);
}

StepInput decode_step(const std::vector<uint8_t>& bytes) {
  Reader r{bytes};
  uint32_t magic = 0;
  r.raw(&magic, 4);
  LANTERN_CHECK(magic == kPlanMagic,
                "tensor-parallel step plan has magic 0x%08x, expected 0x%08x "
                "(ranks built from different Lantern versions?)",
                magic, kPlanMagic);
  StepInput in;
  int32_t max_fresh = 0;
  uint8_t copy = 0;
  r.raw(&max_fresh, 4);
  r.raw(&copy, 1);
  in.max_fresh_len = max_fresh;
  in.copy_logits = copy != 0;
  r.vec(in.tokens);
  r.vec(in.positions);
  r.vec(in.slots);
  r.vec(in.fresh_starts);
  r.vec(in.logit_rows);
  r.vec(in.temperature);
  r.vec(in.top_p);
  r.vec(in.top_k);
  r.vec(in.gen_index);
  r.vec(in.seeds);
  r.vec(in.table_updates);
  LANTERN_CHECK(r.at == bytes.size(), "tensor-parallel step plan has %zu trailing bytes",
                bytes.size() - r.at);
  const size_t n = in.tokens.size();
  LANTERN_CHECK(in.positions.size() == n && in.slots.size() == n && !in.fresh_starts.empty(),
                "tensor-parallel step plan: inconsistent row arrays");
  return in;
}

}  // namespace lantern
