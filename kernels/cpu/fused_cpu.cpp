// Variant 0 of the fused families: each is DEFINED as the unfused kernels it
// replaces, run one after the other through their own CPU references, so the
// fused engine path on the CPU computes exactly what the unfused one does and
// the GPU fusions are tested against the unfused definition.
//   add_rmsnorm   = residual (x += y), then rmsnorm (x -> out)
//   rope_kv_write = copy q rows to q_out, rope (q_out, k in qkv), kv_write (k, v)
//   gate_up_swiglu = gemm (a @ [w_gate; w_up]^T into gate_up), swiglu (stride 2 inter)
//   proj_residual_norm = gemm (a @ w^T into y), add_rmsnorm (x += y, out = rmsnorm(x));
//                        with out == nullptr gemm, residual (x += y)
//   qkv_rope = gemm (a @ w_qkv^T into qkv), rope_kv_write (its own reference above);
//              with the attention folded in (QkvAttention), then attention_decode over q_out
// A GEMM's prologue norm (PrologueNorm) reaches these already applied:
// kernels::launch runs rmsnorm ahead of variant 0 (it has no norm_prologue).
#include <cstring>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

const KernelEntry& reference(Family f) { return Registry::global().find(f, "0"); }

void add_rmsnorm_cpu(const AddRmsnormArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.out != a.x && a.out != a.y, "add_rmsnorm: out must not alias x or y");
  launch(reference(Family::residual), ResidualArgs{a.x, a.y, size_t(a.n) * a.hidden}, ctx);
  launch(reference(Family::rmsnorm), RmsnormArgs{a.x, a.weight, a.out, nullptr, a.n, a.hidden, a.eps},
         ctx);
}

void rope_kv_write_cpu(const RopeKvWriteArgs& a, const LaunchCtx& ctx) {
  const int hd = a.cache.head_dim, q_dim = a.n_q_heads * hd, kv_dim = a.cache.n_kv_heads * hd;
  LANTERN_CHECK(a.qkv_stride >= q_dim + 2 * kv_dim,
                "rope_kv_write: qkv_stride %d < q_dim + 2 * kv_dim = %d", a.qkv_stride,
                q_dim + 2 * kv_dim);
  auto* qkv = static_cast<float*>(a.qkv);
  auto* q_out = static_cast<float*>(a.q_out);
  for (int t = 0; t < a.n; ++t)
    std::memcpy(q_out + size_t(t) * q_dim, qkv + size_t(t) * a.qkv_stride, q_dim * sizeof(float));
  float* k = qkv + q_dim;
  const float* v = k + kv_dim;
  launch(reference(Family::rope),
         RopeArgs{q_out, k, a.positions, a.inv_freq, a.n, a.n_q_heads, a.cache.n_kv_heads, hd, q_dim,
                  a.qkv_stride},
         ctx);
  launch(reference(Family::kv_write), KvWriteArgs{k, v, a.positions, a.seq_slots, a.cache, a.n, a.qkv_stride},
         ctx);
}

void gate_up_swiglu_cpu(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  launch(reference(Family::gemm), GemmArgs{a.a, a.w, a.gate_up, a.m, 2 * a.inter, a.k}, ctx);
  auto* gate = static_cast<float*>(a.gate_up);
  launch(reference(Family::swiglu), SwigluArgs{gate, gate + a.inter, a.out, a.m, a.inter, 2 * a.inter}, ctx);
}

void proj_residual_norm_cpu(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  launch(reference(Family::gemm), GemmArgs{a.a, a.w, a.y, a.m, a.hidden, a.k}, ctx);
  if (a.out == nullptr)  // the deferred norm (registry.h): the residual add only
    return launch(reference(Family::residual), ResidualArgs{a.x, a.y, size_t(a.m) * a.hidden}, ctx);
  add_rmsnorm_cpu(AddRmsnormArgs{a.x, a.y, a.norm_weight, a.out, a.m, a.hidden, a.eps}, ctx);
}

void qkv_rope_cpu(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  launch(reference(Family::gemm), a.gemm(), ctx);
  rope_kv_write_cpu(a.rope(), ctx);
  if (a.attention.out)  // the folded decode attention (QkvAttention)
    launch(reference(Family::attention_decode), a.attention_args(), ctx);
}

}  // namespace

void register_fused_cpu(Registry& r) {
  r.add(make_entry<AddRmsnormArgs, add_rmsnorm_cpu, add_rmsnorm_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: the residual reference, then the rmsnorm reference"));
  r.add(make_entry<RopeKvWriteArgs, rope_kv_write_cpu, rope_kv_write_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: q copied out, the rope reference on (q_out, k), the kv_write reference"));
  r.add(make_entry<GateUpSwigluArgs, gate_up_swiglu_cpu, gate_up_swiglu_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: the gemm reference into the [m, 2 inter] scratch, then the swiglu reference"));
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_cpu, proj_residual_norm_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: the gemm reference into y, then the add_rmsnorm reference (residual, rmsnorm)"));
  r.add(make_entry<QkvRopeArgs, qkv_rope_cpu, qkv_rope_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: the gemm reference into qkv, then the rope_kv_write reference (and, with "
      "the attention folded in, the attention_decode reference over q_out)"));
}

}  // namespace lantern::kernels
