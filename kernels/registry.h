#pragma once
// The kernel registry: every kernel family, its argument struct, and its
// numbered variants.
//
// Variant numbers never change meaning: 0 is the CPU fp32 reference (host
// pointers, float activations), 1 reproduces the seed engine's approach on the
// GPU (corrected), higher numbers are ours. Every entry knows its launcher and
// the bytes and FLOPs one call moves, so the harness can report achieved GB/s
// and TFLOP/s against the roofline.
//
// Element types: weights are always bf16. Activations ("act") are float on the
// CPU backend and bf16 on CUDA. Logits are float on both.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// The two CUDA handle types a launch context carries, declared exactly as the
// CUDA headers declare them (driver_types.h, cublas_api.h; repeating a typedef
// is allowed), so this header pulls no CUDA header into the engine: the
// scheduler and the KV block manager compile without the CUDA include path
// (tests/engine/cpu_only/ proves it).
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

namespace lantern::kernels {

enum class Backend : uint8_t { cpu, cuda };
const char* backend_name(Backend b);

enum class Family : uint8_t {
  embedding,
  rmsnorm,
  rope,
  kv_write,
  attention_prefill,
  attention_decode,
  swiglu,
  residual,
  gemm,
  argmax,
  sample,
  add_rmsnorm,
  rope_kv_write,
  gate_up_swiglu,
  proj_residual_norm,
  qkv_rope,
  count
};
constexpr int kNumFamilies = static_cast<int>(Family::count);
const char* family_name(Family f);
Family family_from_name(std::string_view name);  // throws lantern::Error listing valid names

// What one launch needs besides its arguments.
struct LaunchCtx {
  Backend backend = Backend::cpu;
  cudaStream_t stream = nullptr;   // cuda only
  cublasHandle_t cublas = nullptr; // cuda only
  void* workspace = nullptr;       // device scratch shared by variants (attention, sampling)
  size_t workspace_bytes = 0;
};

// Bytes moved and FLOPs done by one call, as the variant counts them
// (the minimum traffic: each input read once, each output written once).
struct Cost {
  double bytes = 0;
  double flops = 0;
};

}  // namespace lantern::kernels

#include "kernels/args.h"

namespace lantern::kernels {

// ---------------------------------------------------------------- entries
template <class Args>
struct FamilyOf;
#define LANTERN_FAMILY_ARGS(F, A) \
  template <>                     \
  struct FamilyOf<A> {            \
    static constexpr Family value = Family::F; \
  }
LANTERN_FAMILY_ARGS(embedding, EmbeddingArgs);
LANTERN_FAMILY_ARGS(rmsnorm, RmsnormArgs);
LANTERN_FAMILY_ARGS(rope, RopeArgs);
LANTERN_FAMILY_ARGS(kv_write, KvWriteArgs);
LANTERN_FAMILY_ARGS(attention_prefill, AttentionPrefillArgs);
LANTERN_FAMILY_ARGS(attention_decode, AttentionDecodeArgs);
LANTERN_FAMILY_ARGS(swiglu, SwigluArgs);
LANTERN_FAMILY_ARGS(residual, ResidualArgs);
LANTERN_FAMILY_ARGS(gemm, GemmArgs);
LANTERN_FAMILY_ARGS(argmax, ArgmaxArgs);
LANTERN_FAMILY_ARGS(sample, SampleArgs);
LANTERN_FAMILY_ARGS(add_rmsnorm, AddRmsnormArgs);
LANTERN_FAMILY_ARGS(rope_kv_write, RopeKvWriteArgs);
LANTERN_FAMILY_ARGS(gate_up_swiglu, GateUpSwigluArgs);
LANTERN_FAMILY_ARGS(proj_residual_norm, ProjResidualNormArgs);
LANTERN_FAMILY_ARGS(qkv_rope, QkvRopeArgs);
#undef LANTERN_FAMILY_ARGS

// Upper bounds the engine sizes the shared device workspace from (once, at
// start-up: no allocation after that).
struct WorkspaceShape {
  int max_batch_tokens = 0;  // rows in one step
  int max_seqs = 0;          // concurrent sequences
  int max_seq_len = 0;       // longest prompt prefilled in one step
  int max_context = 0;       // longest context (tokens) a sequence may reach
  int n_q_heads = 0, n_kv_heads = 0, head_dim = 0, vocab = 0;
};

template <class Args>
using Launcher = void (*)(const Args&, const LaunchCtx&);
template <class Args>
using CostFn = Cost (*)(const Args&);

// Where a variant stands. `tested`: it passed its GPU test against the CPU
// reference on the H200 (variant 0 is the reference). `preferred`: it may be
// the backend's default (Registry::best takes the highest-numbered preferred
// variant) — a variant that passes its test but is slower stays tested only.
struct Standing {
  bool tested;
  bool preferred;
};
inline constexpr Standing kPreferred{true, true};
inline constexpr Standing kTestedOnly{true, false};
// Registered and selectable, its GPU test written but not yet run on the H200
// (a session without device time): never a default.
inline constexpr Standing kUntested{false, false};

struct KernelEntry {
  Family family;
  int variant;               // stable number: 0 cpu reference, 1 seed, 2.. ours
  const char* name;          // short stable name, e.g. "cpu_ref", "seed", "warp_vec"
  Backend backend;
  const char* description;   // one line: what this variant changes
  bool tested;               // Standing::tested
  bool preferred;            // Standing::preferred
  void (*launch)(const void* args, const LaunchCtx& ctx);
  Cost (*cost)(const void* args);
  size_t (*workspace_bytes)(const WorkspaceShape&) = nullptr;  // nullptr: needs none
  // gemm, gate_up_swiglu, qkv_rope: the variant consumes a PrologueNorm itself (else
  // kernels::launch runs the norm before it).
  bool norm_prologue = false;
  // proj_residual_norm: the variant is meant to run with out == nullptr -- the
  // engine then builds the deferred-norm op table (op_table.h) around it.
  bool defers_norm = false;
  // qkv_rope: the variant is meant to run with the decode attention folded in
  // (QkvAttention) -- the engine then builds the folded op table
  // (qkv_attention) for decode steps whose contexts are short (op_table.h).
  bool folds_attention = false;
};

// The entry with its trait flags set (registration: r.add(with_traits(make_entry<...>(...), ...))).
inline KernelEntry with_traits(KernelEntry e, bool norm_prologue, bool defers_norm = false,
                               bool folds_attention = false) {
  e.norm_prologue = norm_prologue;
  e.defers_norm = defers_norm;
  e.folds_attention = folds_attention;
  return e;
}

// Typed registration: wraps a typed launcher and cost function.
template <class Args, Launcher<Args> L, CostFn<Args> C>
KernelEntry make_entry(int variant, const char* name, Backend backend, const char* description,
                       Standing standing = kPreferred,
                       size_t (*workspace_bytes)(const WorkspaceShape&) = nullptr) {
  return KernelEntry{FamilyOf<Args>::value, variant, name, backend, description,
                     standing.tested, standing.preferred,
                     [](const void* a, const LaunchCtx& ctx) { L(*static_cast<const Args*>(a), ctx); },
                     [](const void* a) { return C(*static_cast<const Args*>(a)); },
                     workspace_bytes};
}

// Typed launch through an entry (checks the family matches).
template <class Args>
void launch(const KernelEntry& e, const Args& args, const LaunchCtx& ctx);

// An optional hook of a variant, registered beside its entry: makes, now,
// whatever per-shape choice the variant measures for these args (gemm.6 times
// its cuBLASLt candidates), so that its launches inside a CUDA graph capture
// never have to. The engine calls it outside any capture, at start-up, for
// every shape its op table launches (Model::prepare_kernels).
using PrepareHook = void (*)(const void* args, const LaunchCtx& ctx);

// Typed prepare hook (the launcher's signature).
template <class Args, Launcher<Args> P>
PrepareHook make_prepare() {
  return [](const void* a, const LaunchCtx& ctx) { P(*static_cast<const Args*>(a), ctx); };
}

class Registry {
 public:
  // The process-wide registry with every built-in variant registered.
  static const Registry& global();

  void add(const KernelEntry& e);  // throws on a duplicate (family, variant) or name
  const std::vector<KernelEntry>& entries() const { return entries_; }
  std::vector<const KernelEntry*> variants(Family f) const;
  // Lookup by name ("seed") or number ("1"). Throws lantern::Error listing the
  // family's variants when nothing matches.
  const KernelEntry& find(Family f, std::string_view name_or_number) const;
  // The default for a backend: the highest-numbered preferred variant of it.
  const KernelEntry& best(Family f, Backend b) const;
  // The prepare hook of the entry (family, variant), added after the entry.
  void add_prepare(Family f, int variant, PrepareHook hook);
  // The entry's prepare hook; nullptr: it has nothing to prepare.
  PrepareHook prepare(const KernelEntry& e) const;

 private:
  struct Hook {
    Family family;
    int variant;
    PrepareHook fn;
  };
  std::vector<KernelEntry> entries_;
  std::vector<Hook> prepare_;
};

// A choice of one variant per family, all on one backend.
struct KernelSet {
  const KernelEntry* chosen[kNumFamilies] = {};

  // Defaults for the backend, then overrides {"rmsnorm": "seed", ...}.
  static KernelSet defaults(Backend b);
  void select(Family f, std::string_view name_or_number, Backend b);
  const KernelEntry& entry(Family f) const { return *chosen[static_cast<int>(f)]; }
  // The chosen variants not yet run on a GPU (Standing::tested false), in family order.
  std::vector<const KernelEntry*> untested() const;
};

[[noreturn]] void launch_family_mismatch(const KernelEntry& e, Family expected);

// Registration hooks, one per backend file group (explicit, so static
// libraries never drop them).
void register_cpu_kernels(Registry& r);
// The shared-memory carveout (percent of the unified L1 / shared memory) that
// the calling thread's CUDA launches of our kernels prefer while it is set: a
// per-launch attribute, so CUDA graph kernel nodes captured meanwhile keep it.
// -1 (the default): the driver's choice per kernel. The engine sets it per
// step (Model::forward, small_batch_carveout in engine/model.h);
// LANTERN_SMEM_CARVEOUT (cuda_common.cuh) overrides it for every launch.
void set_launch_carveout(int percent);
int launch_carveout();
// set_launch_carveout(percent) for a scope; the value before it comes back at the end.
class ScopedLaunchCarveout {
 public:
  explicit ScopedLaunchCarveout(int percent) : before_(launch_carveout()) { set_launch_carveout(percent); }
  ~ScopedLaunchCarveout() { set_launch_carveout(before_); }
  ScopedLaunchCarveout(const ScopedLaunchCarveout&) = delete;
  ScopedLaunchCarveout& operator=(const ScopedLaunchCarveout&) = delete;

 private:
  const int before_;
};

// rmsnorm(x) * norm.weight into norm.out ([m, k]) by the backend's preferred
// rmsnorm variant (PrologueNorm's fallback); returns norm.out. Throws when
// norm.out is null.
const void* run_prologue_norm(Backend backend, const void* x, const PrologueNorm& norm, int m, int k,
                              const LaunchCtx& ctx);

// `a` (GemmArgs, GateUpSwigluArgs, QkvRopeArgs) with its prologue norm run ahead
// (run_prologue_norm) and a = norm.out; unchanged without a norm. What
// kernels::launch does for a variant without norm_prologue, and what such a
// variant does itself on a path its kernel cannot fold the norm into.
template <class Args>
Args with_norm_applied(const Args& a, Backend backend, const LaunchCtx& ctx) {
  if (a.norm.weight == nullptr) return a;
  Args plain = a;
  plain.a = run_prologue_norm(backend, a.a, a.norm, a.m, a.k, ctx);
  plain.norm = PrologueNorm{};
  return plain;
}

template <class Args>
void launch(const KernelEntry& e, const Args& args, const LaunchCtx& ctx) {
  if (e.family != FamilyOf<Args>::value) launch_family_mismatch(e, FamilyOf<Args>::value);
  if constexpr (std::is_same_v<Args, GemmArgs> || std::is_same_v<Args, GateUpSwigluArgs> ||
                std::is_same_v<Args, QkvRopeArgs>) {
    if (args.norm.weight != nullptr && !e.norm_prologue) {  // the norm first, then the variant on its output
      const Args plain = with_norm_applied(args, e.backend, ctx);
      e.launch(&plain, ctx);
      return;
    }
  }
  e.launch(&args, ctx);
}
void register_cuda_kernels(Registry& r);

}  // namespace lantern::kernels
