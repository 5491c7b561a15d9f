#include "engine/model_meta.h"

#include <cstring>

#include "engine/model.h"

namespace lantern {

namespace {
size_t align256(size_t x) { return (x + 255) / 256 * 256; }
}  // namespace

MetaLayout::MetaLayout(int T, int R, int U) {
  size_t o = 0;
  auto take = [&o](size_t b) {
    size_t at = o;
    o = align256(o + b);
    return at;
  };
  ids = take(4 * T);
  positions = take(4 * T);
  slots = take(4 * T);
  fresh_starts = take(4 * (T + 1));
  ctx_lens = take(4 * T);
  logit_rows = take(4 * R);
  top_k = take(4 * R);
  gen_index = take(4 * R);
  out_tokens = take(4 * R);
  temperature = take(4 * R);
  top_p = take(4 * R);
  seeds = take(8 * R);
  token_src = take(4 * T);
  head_slots = take(4 * R);
  head_ctx_lens = take(4 * R);
  updates = take(8 * static_cast<size_t>(U));
  bytes = o;
}

void fill_step_meta(const MetaLayout& m, char* host, const StepInput& in, const MetaPad& pad, int pad_slot) {
  const int n = in.num_rows();
  const int r = static_cast<int>(in.logit_rows.size());
  // Empty vectors may hand a null data(): memcpy's arguments must not be null
  // even for zero bytes (UBSan), so an empty region is skipped.
  auto put = [host](size_t off, const void* src, size_t bytes) {
    if (bytes != 0) std::memcpy(host + off, src, bytes);
  };
  auto i32 = [host](size_t off) { return reinterpret_cast<int32_t*>(host + off); };
  put(m.ids, in.tokens.data(), 4 * n);
  put(m.positions, in.positions.data(), 4 * n);
  put(m.slots, in.slots.data(), 4 * n);
  put(m.fresh_starts, in.fresh_starts.data(), 4 * in.fresh_starts.size());
  for (int i = 0; i < n; ++i) i32(m.ctx_lens)[i] = in.positions[i] + 1;
  put(m.logit_rows, in.logit_rows.data(), 4 * r);
  put(m.top_k, in.top_k.data(), 4 * r);
  put(m.gen_index, in.gen_index.data(), 4 * r);
  put(m.temperature, in.temperature.data(), 4 * r);
  put(m.top_p, in.top_p.data(), 4 * r);
  put(m.seeds, in.seeds.data(), 8 * r);
  put(m.token_src, in.token_src.data(), 4 * in.token_src.size());
  for (int i = 0; i < r; ++i) {
    const int32_t t = in.logit_rows[i];
    const bool row = t >= 0 && t < n;  // Model::launch checks the rows; never a read outside them
    i32(m.head_slots)[i] = row ? in.slots[t] : pad_slot;
    i32(m.head_ctx_lens)[i] = row ? in.positions[t] + 1 : 1;
  }
  for (int i = n; i < pad.rows; ++i) {
    i32(m.ids)[i] = 0;
    i32(m.positions)[i] = 0;
    i32(m.slots)[i] = pad_slot;
    i32(m.ctx_lens)[i] = 1;
  }
  for (int j = r; j < pad.logit_rows; ++j) {
    i32(m.logit_rows)[j] = j;
    i32(m.top_k)[j] = 0;
    i32(m.gen_index)[j] = 0;
    reinterpret_cast<float*>(host + m.temperature)[j] = 0.0f;
    reinterpret_cast<float*>(host + m.top_p)[j] = 1.0f;
    reinterpret_cast<uint64_t*>(host + m.seeds)[j] = 0;
    i32(m.head_slots)[j] = pad_slot;
    i32(m.head_ctx_lens)[j] = 1;
  }
  const int num_fresh = static_cast<int>(in.fresh_starts.size()) - 1;
  for (int k = num_fresh + 1; k <= pad.fresh_seqs; ++k) i32(m.fresh_starts)[k] = in.num_fresh_rows();
}

}  // namespace lantern
