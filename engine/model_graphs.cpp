// CUDA graphs of decode steps, captured once at start-up for batch-size
// buckets and replayed with padding (the convention is in model.h). Kernels
// read everything that changes per step from step_meta, so one capture per
// (bucket, head) serves every later step of that shape.
#include <algorithm>
#include <unordered_map>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "engine/model.h"

namespace lantern {

using kernels::Family;

// The variants' prepare hooks (gemm.6 times its cuBLASLt candidates on the GPU)
// for every shape a step can launch, before capture_graphs: nothing may be
// timed inside a capture. The GEMMs of prefill and decode steps are the same
// ops, so one pass over prefill tables covers both: rows at every power of two
// below max_batch_tokens (gemm.6 plans per power-of-two m bucket), at
// max_batch_tokens and at max_seqs (the largest decode graph); the LM head at
// min(rows, logits_rows). The pass is one op, "kernel_prepare", outside any
// step, so a profiler attributes the timing launches to it.
void Model::prepare_kernels() {
  if (!dev_.is_cuda()) return;
  const kernels::Registry& registry = kernels::Registry::global();
  auto has_hook = [&](Family f) { return registry.prepare(kernels_.entry(f)) != nullptr; };
  bool any = false;
  for (int f = 0; f < kernels::kNumFamilies; ++f) any |= has_hook(static_cast<Family>(f));
  if (!any) return;
  std::vector<int> rows;
  for (int n = 1; n < limits_.max_batch_tokens; n *= 2) rows.push_back(n);
  rows.push_back(limits_.max_batch_tokens);
  rows.push_back(limits_.max_seqs);
  OpInfo info;
  info.op = "kernel_prepare";
  LANTERN_OBSERVE(obs_, on_op_begin(info));
  preparing_ = true;
  try {
    for (int n : rows) {
      ForwardShape s;
      s.n = n;
      s.r = std::min(n, limits_.logits_rows);
      s.kind = StepKind{StepKind::prefill, StepKind::argmax};
      for (const OpSpec& o : op_table_->ops(s.kind))
        if (o.kind != OpKind::all_reduce && o.kind != OpKind::all_gather && has_hook(o.family))
          launch_op(o, s);  // collectives have no kernel to prepare
    }
  } catch (...) {
    preparing_ = false;
    LANTERN_OBSERVE(obs_, on_op_end(info));
    throw;
  }
  preparing_ = false;
  LANTERN_OBSERVE(obs_, on_op_end(info));
  dev_.synchronize();
}

std::vector<kernels::GemmPlan> Model::gemm_plans() const {
  std::vector<kernels::GemmPlan> out;
  if (!dev_.is_cuda() || gemm_shapes_.empty()) return out;
  for (const kernels::GemmPlan& p : kernels::gemm_plans())
    if (p.device == dev_.gpu().device && gemm_shapes_.count({p.n, p.k, p.c_f32})) out.push_back(p);
  return out;
}

void Model::capture_graphs() {
  // Decode steps have at most max_seqs rows, each a logit row.
  const int largest = std::min(limits_.max_seqs, limits_.logits_rows);
  for (int b = 1; b < largest; b *= 2) buckets_.push_back(b);
  buckets_.push_back(largest);
  graphs_.resize(2 * buckets_.size());
  dev_.synchronize();
  const size_t free_before = dev_.free_memory();
  for (size_t i = 0; i < buckets_.size(); ++i)
    for (int sampling = 0; sampling < 2; ++sampling) {
      const int index = static_cast<int>(2 * i) + sampling;
      Graph& g = graphs_[index];
      g.rows = buckets_[i];
      capture(g, sampling == 1);
      LANTERN_OBSERVE(obs_, on_graph_captured(GraphReplay{index, g.ops.data(), static_cast<int>(g.ops.size())}));
    }
  dev_.synchronize();
  const size_t free_after = dev_.free_memory();
  budget_.cuda_graphs = free_before > free_after ? free_before - free_after : 0;
  budget_.cuda_graph_count = static_cast<int>(graphs_.size());
}

void Model::capture(Graph& g, bool sampling) {
  ForwardShape s;
  s.n = s.r = g.rows;
  s.kind = StepKind{StepKind::decode, sampling ? StepKind::sample : StepKind::argmax};
  captured_.clear();
  leaves_.clear();
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(dev_.stream(), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  try {
    forward(s);
  } catch (...) {
    capturing_ = false;
    cudaStreamEndCapture(dev_.stream(), &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  capturing_ = false;
  CUDA_CHECK(cudaStreamEndCapture(dev_.stream(), &graph));
  count_graph_kernels(graph, captured_);
  cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  // Upload now, so the first replay allocates nothing mid-run.
  CUDA_CHECK(cudaGraphUpload(g.exec, dev_.stream()));
  g.ops = std::move(captured_);
  for (OpInfo& op : g.ops) op.graph = OpInfo::kReplay;
}

// Pure decode steps (every row a paged row with its own logits) replay the
// smallest bucket that holds them; logits copied to the host (score mode,
// on_logits) are the real rows', which come first.
int Model::graph_index(const ForwardShape& s) const {
  if (buckets_.empty() || s.kind.attention != StepKind::decode || s.r != s.n || s.n > buckets_.back())
    return -1;
  const auto bucket = std::lower_bound(buckets_.begin(), buckets_.end(), s.n) - buckets_.begin();
  return static_cast<int>(2 * bucket) + (s.kind.head == StepKind::sample ? 1 : 0);
}

void Model::replay(int index) {
  const Graph& g = graphs_[index];
  CUDA_CHECK(cudaGraphLaunch(g.exec, dev_.stream()));
#if LANTERN_INSTRUMENTATION
  if (obs_) obs_->on_graph_replay(GraphReplay{index, g.ops.data(), static_cast<int>(g.ops.size())});
#endif
}

void Model::destroy_graphs() {
  for (Graph& g : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

cudaGraphNode_t Model::capture_leaf() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // without it: cudaErrorLossyQuery on
  size_t num_deps = 0;                        // programmatic edges (cuBLAS launches)
  if (cudaStreamGetCaptureInfo(dev_.stream(), &status, nullptr, nullptr, &deps, &edges, &num_deps) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // not the engine's error: counts stay unknown
    return nullptr;
  }
  return status == cudaStreamCaptureStatusActive && num_deps == 1 ? deps[0] : nullptr;
}

// OpInfo::graph_kernels of the captured ops, from the capture's last node
// after each op (leaves_). One stream's capture is a chain: walk it from its
// root, then give each op the kernel nodes after the previous op's last
// node, up to its own. Any failure leaves the counts unknown (-1), and no
// CUDA error behind.
void Model::count_graph_kernels(cudaGraph_t graph, std::vector<OpInfo>& ops) const {
  auto give_up = [] { (void)cudaGetLastError(); };
  if (ops.size() != leaves_.size()) return;  // instrumentation compiled out: no ops recorded
  std::vector<cudaGraphNode_t> chain;
  cudaGraphNode_t next[2] = {nullptr, nullptr};
  cudaGraphEdgeData edges[2];  // programmatic edges (cuBLAS) need their data read
  size_t n = 2;
  if (cudaGraphGetRootNodes(graph, next, &n) != cudaSuccess || n != 1) return give_up();
  while (n == 1) {
    chain.push_back(next[0]);
    n = 2;
    if (cudaGraphNodeGetDependentNodes(chain.back(), next, edges, &n) != cudaSuccess || n > 1)
      return give_up();
  }
  std::unordered_map<cudaGraphNode_t, size_t> position;
  for (size_t i = 0; i < chain.size(); ++i) position[chain[i]] = i;
  std::vector<int> kernels_before(chain.size() + 1, 0);  // kernel nodes in chain[0, i)
  for (size_t i = 0; i < chain.size(); ++i) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(chain[i], &type) != cudaSuccess) return give_up();
    kernels_before[i + 1] = kernels_before[i] + (type == cudaGraphNodeTypeKernel);
  }
  size_t done = 0;  // chain nodes owned by the ops so far
  for (size_t k = 0; k < ops.size(); ++k) {
    // No single leaf after the op, or one outside the chain or before the
    // previous op's: the ops do not map onto the chain; no counts at all.
    auto it = leaves_[k] ? position.find(leaves_[k]) : position.end();
    if (it == position.end() || it->second + 1 < done) {
      for (OpInfo& o : ops) o.graph_kernels = -1;
      return;
    }
    const size_t end = it->second + 1;
    ops[k].graph_kernels = kernels_before[end] - kernels_before[done];
    done = end;
  }
}

}  // namespace lantern
