// Model::all_reduce: the tensor-parallel collective after o_proj and
// down_proj. It is an op like the others (observers see it as op
// "all_reduce", so NVTX ranges and CUPTI attribution name the NCCL kernels),
// with no registry kernel: the communicator runs it on the step's stream.
#include "engine/model.h"

namespace lantern {

void Model::all_reduce(const OpSpec& o, int rows) {
  const size_t count = static_cast<size_t>(rows) * cfg_.hidden_size;
  void* buf = arena_.ptr(o.writes[0]);
  const ReduceType type = dev_.is_cuda() ? ReduceType::bf16 : ReduceType::f32;
#if LANTERN_INSTRUMENTATION
  if (obs_ || capturing_) {
    OpInfo info;
    info.graph = capturing_ ? OpInfo::kCapture : OpInfo::kEager;
    info.op = o.name;
    info.layer = o.layer;
    // Bytes of the buffer reduced (the harness derives bus bandwidth from it).
    info.cost = kernels::Cost{static_cast<double>(count * act_bytes_), static_cast<double>(count)};
    info.reads = o.reads.data();
    info.num_reads = o.num_reads;
    info.writes = o.writes.data();
    info.num_writes = o.num_writes;
    if (obs_) obs_->on_op_begin(info);
    comm_->all_reduce(buf, count, type, dev_.stream());
    if (capturing_) {
      captured_.push_back(info);
      leaves_.push_back(capture_leaf());
    }
    if (obs_) obs_->on_op_end(info);
    return;
  }
#endif
  comm_->all_reduce(buf, count, type, dev_.stream());
}

}  // namespace lantern
