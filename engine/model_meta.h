#pragma once
// The step metadata block ("step_meta" in the arena, plus its pinned host
// mirror): everything that changes from step to step (token ids, positions,
// slots, context lengths, logit rows, sampling parameters, block-table
// updates). One copy per step moves it to the device, and kernels read it
// from there -- which is what makes captured decode graphs replayable.
#include <cstddef>
#include <cstdint>

namespace lantern {

struct StepInput;

// Byte offsets of each section (256-byte aligned) for up to T rows, R logit
// rows and U block-table updates.
struct MetaLayout {
  size_t ids = 0, positions = 0, slots = 0, fresh_starts = 0, ctx_lens = 0, logit_rows = 0,
         top_k = 0, gen_index = 0, out_tokens = 0, temperature = 0, top_p = 0, seeds = 0,
         token_src = 0, head_slots = 0, head_ctx_lens = 0, updates = 0, bytes = 0;
  MetaLayout() = default;
  MetaLayout(int T, int R, int U);
};

// What a step is padded to when it replays a graph captured for a larger
// shape (decode: rows == logit_rows == the bucket, fresh_seqs 0; prefill:
// rows == the token bucket, logit_rows == fresh_seqs, or 0 without a head).
// Eager steps pad nothing: the step's own counts.
struct MetaPad {
  int rows = 0, logit_rows = 0, fresh_seqs = 0;
};

// Fills the host mirror for `in`, padded with harmless entries up to `pad`
// (docs/architecture.md, CUDA graphs). Pad row i (n <= i < pad.rows): token 0
// at position 0 in slot `pad_slot` (context length 1); its K/V go to the
// scratch block. Pad logit row j (r <= j < pad.logit_rows): row j, greedy; its
// token is ignored. Pad fresh sequences (num_fresh < k <= pad.fresh_seqs):
// bounds [n, n), empty, so a prefill pad row belongs to no sequence.
// head_slots / head_ctx_lens [R]: the slot and context length of each logit
// row's token (the pruned last layer's attention_head); a pad logit row's are
// `pad_slot` and 1, as a pad row's.
void fill_step_meta(const MetaLayout& m, char* host, const StepInput& in, const MetaPad& pad, int pad_slot);

}  // namespace lantern
