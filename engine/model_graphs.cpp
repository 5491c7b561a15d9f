// CUDA graphs of decode and prefill steps, captured once at start-up for
// batch-size / token buckets and replayed with padding (the conventions are
// in model.h). Kernels read everything that changes per step from step_meta,
// so one capture per (bucket, head) serves every later step of that shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "kernels/base/cuda_check.h"
#include "kernels/base/env_knob.h"
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
  // With folding, each bucket also has the folded tables' graphs (short contexts).
  decode_kinds_ = fold_max_context_ > 0 ? 4 : 2;
  for (int b : buckets_)
    for (int kind = 0; kind < decode_kinds_; ++kind) {
      Graph g;
      g.shape = MetaPad{b, b, 0};
      graphs_.push_back(std::move(g));
    }
  capture_set(0, static_cast<int>(graphs_.size()));
}

std::vector<int> prefill_token_buckets(int max_tokens) {
  std::vector<int> buckets;
  for (int b = 16; b < max_tokens;) {
    buckets.push_back(b);
    const bool power_of_two = (b & (b - 1)) == 0;
    b = b < 128 ? 2 * b : (power_of_two ? b * 3 / 2 : b * 4 / 3);
  }
  buckets.push_back(max_tokens);
  return buckets;
}

// Prefill graphs bake the attention_prefill launch into the graph with host
// shape values (grid: bucket rows x seqs sequences) and must find everything
// else in step_meta. The seed variant (1) loops over the sequences on the
// host, and flash_mma falls back to it for head sizes other than 32, 64 and
// 128: neither can be replayed for other prompt lengths. Tensor-parallel
// groups run prefill eagerly (not yet checked with NCCL inside these graphs).
bool Model::can_capture_prefill() const {
  const int hd = cfg_.head_dim;
  return comm_ == nullptr && kernels_.entry(kernels::Family::attention_prefill).variant >= 2 &&
         (hd == 32 || hd == 64 || hd == 128);
}

// Bucket-major: (bucket, sequence class, head) -> prefill_base_ +
// (bucket * classes + class) * 3 + head (StepKind::Head order: none, argmax,
// sample). The "many" class holds up to min(max_seqs, logits_rows) prompts
// (no more than the bucket's rows).
void Model::capture_prefill_graphs() {
  prefill_buckets_ = prefill_token_buckets(limits_.max_batch_tokens);
  const int many = std::min(limits_.max_seqs, limits_.logits_rows);
  prefill_seqs_ = many > 1 ? std::vector<int>{1, many} : std::vector<int>{1};
  prefill_base_ = static_cast<int>(graphs_.size());
  for (int b : prefill_buckets_)
    for (int seqs : prefill_seqs_) {
      seqs = std::min(seqs, b);
      for (int head = 0; head < 3; ++head) {
        Graph g;
        g.shape = MetaPad{b, head ? seqs : 0, seqs};
        graphs_.push_back(std::move(g));
      }
    }
  capture_set(prefill_base_, static_cast<int>(graphs_.size()) - prefill_base_);
  budget_.prefill_graph_count = static_cast<int>(graphs_.size()) - prefill_base_;
}

void Model::capture_set(int first, int count) {
  dev_.synchronize();
  const size_t free_before = dev_.free_memory();
  for (int index = first; index < first + count; ++index) {
    Graph& g = graphs_[index];
    ForwardShape s;
    s.n = g.shape.rows;
    s.r = g.shape.logit_rows;
    if (g.shape.fresh_seqs == 0) {  // decode: graphs_ index decode_kinds_ * bucket + 2 * fold + sampling
      s.kind = StepKind{StepKind::decode, index % 2 ? StepKind::sample : StepKind::argmax};
      s.kind.fold = (index % decode_kinds_) / 2 == 1;
      s.one_row_per_seq = true;  // replayed only for such steps (graph_index)
      s.max_context = s.kind.fold ? fold_max_context_ : limits_.max_context;  // host checks only: kernels read step_meta
      s.logits_in_order = true;  // replayed only for such steps (graph_index)
      choose_final(s);
    } else {
      // One sequence of every row, the others empty: what the launch checks on
      // the host; replays read the real bounds from step_meta.
      capture_starts_.assign(g.shape.fresh_seqs + 1, s.n);
      capture_starts_[0] = 0;
      s.nf = s.n;
      s.num_fresh = g.shape.fresh_seqs;
      s.max_fresh_len = s.n;
      s.host_fresh_starts = capture_starts_.data();
      s.kind = StepKind{StepKind::prefill, static_cast<StepKind::Head>((index - prefill_base_) % 3)};
      s.head_one_row_per_seq = true;  // one logit row per prompt (prefill_graph_index), pads in the pad slot
      choose_pruning(s);
    }
    capture(g, s);
    LANTERN_OBSERVE(obs_, on_graph_captured(GraphReplay{index, g.ops.data(), static_cast<int>(g.ops.size())}));
  }
  dev_.synchronize();
  const size_t free_after = dev_.free_memory();
  budget_.cuda_graphs += free_before > free_after ? free_before - free_after : 0;
  budget_.cuda_graph_count = static_cast<int>(graphs_.size());
}

void Model::capture(Graph& g, const ForwardShape& s) {
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
  // Score mode's and continuing chunks' steps (rows of one sequence) run
  // eagerly: the graphs are captured for one row per sequence.
  if (buckets_.empty() || s.kind.attention != StepKind::decode || s.r != s.n || s.n > buckets_.back() ||
      !s.one_row_per_seq || s.kind.fuse_final != fuse_final_)
    return -1;
  const auto bucket = std::lower_bound(buckets_.begin(), buckets_.end(), s.n) - buckets_.begin();
  return static_cast<int>(decode_kinds_ * bucket) + (s.kind.fold ? 2 : 0) + (s.kind.head == StepKind::sample ? 1 : 0);
}

// Pure prefill steps with one logit row per prompt (or none: a first chunk)
// replay the smallest token bucket that holds them, in the one-prompt class
// or the many-prompt one. Score mode (a logit row per position) runs eagerly.
int Model::prefill_graph_index(const ForwardShape& s) const {
  if (prefill_buckets_.empty() || s.kind.attention != StepKind::prefill || s.n > prefill_buckets_.back() ||
      s.r != (s.kind.head == StepKind::none ? 0 : s.num_fresh))
    return -1;
  const int bucket = static_cast<int>(
      std::lower_bound(prefill_buckets_.begin(), prefill_buckets_.end(), s.n) - prefill_buckets_.begin());
  const int cls = s.num_fresh == 1 ? 0 : 1;
  const int classes = static_cast<int>(prefill_seqs_.size());
  if (cls >= classes) return -1;
  const int index = prefill_base_ + (bucket * classes + cls) * 3 + static_cast<int>(s.kind.head);
  return s.num_fresh <= graphs_[index].shape.fresh_seqs ? index : -1;
}

void Model::replay(int index) {
  Graph& g = graphs_[index];
  // LANTERN_GRAPH_LAUNCH_LOG=1: each prefill replay's host time in cudaGraphLaunch on stderr
  // (a diagnosis knob: how long the GPU may wait for the launch before the graph's first kernel).
  static const bool log = kernels::env_int("LANTERN_GRAPH_LAUNCH_LOG") != 0;
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaGraphLaunch(g.exec, dev_.stream()));
  if (log && g.shape.fresh_seqs > 0)
    std::fprintf(stderr, "graph launch: prefill graph %d (%d rows, %zu ops) %.1f us on the host\n", index,
                 g.shape.rows, g.ops.size(),
                 std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
#if LANTERN_INSTRUMENTATION
  if (obs_) {
    if (g.shape.fresh_seqs == 0) refresh_decode_costs(g);  // prefill graphs: costs as captured
    obs_->on_graph_replay(GraphReplay{index, g.ops.data(), static_cast<int>(g.ops.size())});
  }
#endif
}

// The attention_decode kernels read the context lengths from step_meta, so a
// replay costs what this step's contexts cost, not what the capture's did:
// recomputed from the pinned mirror (which upload_meta filled for g.shape.rows rows,
// pad rows at context 1). Every layer's call costs the same.
void Model::refresh_decode_costs(Graph& g) const {
  const kernels::KernelEntry& e = kernels_.entry(kernels::Family::attention_decode);
  kernels::AttentionDecodeArgs a{};
  a.context_lens = a.host_context_lens = host_ctx_lens();
  a.cache.block_size = limits_.kv_block_size;
  a.cache.n_kv_heads = cfg_.num_kv_heads;
  a.cache.head_dim = cfg_.head_dim;
  a.b = g.shape.rows;
  a.max_context = limits_.max_context;
  a.n_q_heads = cfg_.num_q_heads;
  a.q_stride = cfg_.q_dim();
  const kernels::Cost cost = e.cost(&a);
  // The folded table's qkv_attention (qkv_rope with the attention): its cost too.
  const kernels::KernelEntry& qe = kernels_.entry(kernels::Family::qkv_rope);
  kernels::QkvRopeArgs q{};
  q.m = g.shape.rows;
  q.k = cfg_.hidden_size;
  q.n_q_heads = cfg_.num_q_heads;
  q.cache = a.cache;
  q.attention.out = &q;  // any non-null: the folded form's cost
  q.attention.context_lens = q.attention.host_context_lens = a.context_lens;
  q.attention.max_context = a.max_context;
  const kernels::Cost folded = qe.cost(&q);
  for (OpInfo& op : g.ops) {
    if (op.kernel == &e) op.cost = cost;
    if (op.kernel == &qe && std::strcmp(op.op, "qkv_attention") == 0) op.cost = folded;
  }
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
