#include "kernels/registry.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "kernels/base/errors.h"

namespace lantern::kernels {

namespace {
constexpr const char* kFamilyNames[kNumFamilies] = {
    "embedding", "rmsnorm", "rope",   "kv_write", "attention_prefill", "attention_decode",
    "swiglu",    "residual", "gemm", "argmax",   "sample", "add_rmsnorm", "rope_kv_write",
    "gate_up_swiglu", "proj_residual_norm", "qkv_rope"};
}

const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

const char* family_name(Family f) { return kFamilyNames[static_cast<int>(f)]; }

Family family_from_name(std::string_view name) {
  std::string all;
  for (int i = 0; i < kNumFamilies; ++i) {
    if (name == kFamilyNames[i]) return static_cast<Family>(i);
    all += (i ? ", " : "");
    all += kFamilyNames[i];
  }
  LANTERN_FAIL("unknown kernel family '%.*s': valid families are %s", static_cast<int>(name.size()),
               name.data(), all.c_str());
}

void Registry::add(const KernelEntry& e) {
  for (const auto& x : entries_) {
    LANTERN_ASSERT(!(x.family == e.family && (x.variant == e.variant ||
                                               std::string_view(x.name) == e.name)),
                   "duplicate kernel %s variant %d (%s)", family_name(e.family), e.variant, e.name);
  }
  entries_.push_back(e);
}

void Registry::add_prepare(Family f, int variant, PrepareHook hook) {
  bool found = false;
  for (const auto& e : entries_) found |= e.family == f && e.variant == variant;
  LANTERN_ASSERT(found && hook, "prepare hook for %s variant %d: no such entry (add it first)",
                 family_name(f), variant);
  prepare_.push_back(Hook{f, variant, hook});
}

PrepareHook Registry::prepare(const KernelEntry& e) const {
  for (const Hook& h : prepare_)
    if (h.family == e.family && h.variant == e.variant) return h.fn;
  return nullptr;
}

std::vector<const KernelEntry*> Registry::variants(Family f) const {
  std::vector<const KernelEntry*> out;
  for (const auto& e : entries_)
    if (e.family == f) out.push_back(&e);
  std::sort(out.begin(), out.end(),
            [](const KernelEntry* a, const KernelEntry* b) { return a->variant < b->variant; });
  return out;
}

const KernelEntry& Registry::find(Family f, std::string_view key) const {
  int number = -1;
  auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), number);
  bool is_number = ec == std::errc() && p == key.data() + key.size();
  std::string listing;
  for (const KernelEntry* e : variants(f)) {
    if ((is_number && e->variant == number) || (!is_number && key == e->name)) return *e;
    listing += strformat("%s%d=%s(%s%s)", listing.empty() ? "" : ", ", e->variant, e->name,
                         backend_name(e->backend), e->tested ? "" : ", not yet run on a GPU");
  }
  LANTERN_FAIL("unknown %s kernel '%.*s': choose one of %s", family_name(f),
               static_cast<int>(key.size()), key.data(), listing.c_str());
}

const KernelEntry& Registry::best(Family f, Backend b) const {
  const KernelEntry* best = nullptr;
  for (const KernelEntry* e : variants(f))
    if (e->backend == b && (e->preferred || !best)) best = e;
  LANTERN_CHECK(best, "no %s kernel is built for the %s backend", family_name(f), backend_name(b));
  return *best;
}

void launch_family_mismatch(const KernelEntry& e, Family expected) {
  LANTERN_ASSERT(false, "kernel %s.%s launched with %s arguments", family_name(e.family), e.name,
                 family_name(expected));
  std::abort();
}

namespace {
thread_local int g_launch_carveout = -1;
}  // namespace
void set_launch_carveout(int percent) { g_launch_carveout = percent; }
int launch_carveout() { return g_launch_carveout; }

const void* run_prologue_norm(Backend backend, const void* x, const PrologueNorm& norm, int m, int k,
                              const LaunchCtx& ctx) {
  LANTERN_CHECK(norm.out != nullptr,
                "a GEMM given a prologue norm needs its [m, k] scratch (PrologueNorm::out) for a variant "
                "without the prologue; pass the xn view");
  const KernelEntry& e = Registry::global().best(Family::rmsnorm, backend);
  launch(e, RmsnormArgs{x, norm.weight, norm.out, nullptr, m, k, norm.eps}, ctx);
  return norm.out;
}

const Registry& Registry::global() {
  static const Registry registry = [] {
    Registry r;
    register_cpu_kernels(r);
    register_cuda_kernels(r);
    return r;
  }();
  return registry;
}

KernelSet KernelSet::defaults(Backend b) {
  KernelSet s;
  for (int i = 0; i < kNumFamilies; ++i)
    s.chosen[i] = &Registry::global().best(static_cast<Family>(i), b);
  return s;
}

std::vector<const KernelEntry*> KernelSet::untested() const {
  std::vector<const KernelEntry*> out;
  for (const KernelEntry* e : chosen)
    if (e && !e->tested) out.push_back(e);
  return out;
}

void KernelSet::select(Family f, std::string_view key, Backend b) {
  const KernelEntry& e = Registry::global().find(f, key);
  LANTERN_CHECK(e.backend == b, "%s kernel '%s' runs on %s but the engine runs on %s: pick a %s variant",
                family_name(f), e.name, backend_name(e.backend), backend_name(b), backend_name(b));
  chosen[static_cast<int>(f)] = &e;
}

}  // namespace lantern::kernels
