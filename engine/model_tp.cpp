// The tensor-parallel collectives of the forward pass: Model::all_reduce
// after o_proj and down_proj, and Model::all_gather after a split LM head.
// They are ops like the others (observers see op "all_reduce" /
// "all_gather", so NVTX ranges and CUPTI attribution name the NCCL kernels),
// with no registry kernel: the communicator runs them on the step's stream.
#include "engine/model.h"

namespace lantern {

template <class Run>
void Model::collective(const OpSpec& o, size_t bytes, size_t elements, const Run& run) {
  // The bytes moved (the harness derives bus bandwidth from them).
  engine_op(o, kernels::Cost{static_cast<double>(bytes), static_cast<double>(elements)}, run);
}

void Model::all_reduce(const OpSpec& o, int rows) {
  const size_t count = static_cast<size_t>(rows) * cfg_.hidden_size;
  void* buf = arena_.ptr(o.writes[0]);
  const ReduceType type = dev_.is_cuda() ? ReduceType::bf16 : ReduceType::f32;
  collective(o, count * act_bytes_, count,
             [&] { comm_->all_reduce(buf, count, type, dev_.stream()); });
}

// Each rank computed logits_part = its [r, V/N] columns of the logits rows.
// The gather is rank-major ([N][r][V/N]): at r = 1 that is the [1, V] row
// itself, so it lands straight in `logits`; for r > 1 it lands in
// logits_gather and N strided copies put rank p's block at columns
// [p·V/N, (p+1)·V/N) of every row. argmax / sample then read full rows, the
// same on every rank.
void Model::all_gather(const OpSpec& o, int r) {
  const int parts = comm_->world();
  const size_t part = static_cast<size_t>(cfg_.vocab_size / parts), count = r * part;
  const void* mine = arena_.ptr(o.reads[0]);
  char* gathered = static_cast<char*>(arena_.ptr(o.writes[0]));
  char* logits = static_cast<char*>(arena_.ptr(o.writes[1]));
  collective(o, count * parts * 4, count * parts, [&] {
    if (r == 1) {
      comm_->all_gather(mine, logits, count, ReduceType::f32, dev_.stream());
      return;
    }
    comm_->all_gather(mine, gathered, count, ReduceType::f32, dev_.stream());
    for (int p = 0; p < parts; ++p)
      dev_.copy_2d(logits + p * part * 4, static_cast<size_t>(cfg_.vocab_size) * 4, gathered + p * count * 4,
                   part * 4, part * 4, r);
  });
}

}  // namespace lantern
