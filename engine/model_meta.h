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
         updates = 0, bytes = 0;
  MetaLayout() = default;
  MetaLayout(int T, int R, int U);
};

// Fills the host mirror for `in`, padded with harmless rows up to `rows`
// (>= in.num_rows(); a decode step replayed from a larger graph bucket). Pad
// row i: token 0 at position 0 in slot `pad_slot` (context length 1), its
// own logit row, greedy; its K/V go to the scratch block and its token is
// ignored (docs/architecture.md, CUDA graphs).
void fill_step_meta(const MetaLayout& m, char* host, const StepInput& in, int rows, int pad_slot);

}  // namespace lantern
