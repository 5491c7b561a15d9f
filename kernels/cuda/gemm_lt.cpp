// gemm variant 6 (lt_planned) above the GEMV: cublasLtMatmul with the
// algorithm chosen per shape by measurement.
//
// Why: cublasGemmEx (variant 1) runs the library heuristic's first guess. At
// this model's decode/prefill M of 17..512 those guesses ran q/k/v/o at 10-33 %
// of bandwidth (docs/performance.md, "Batched decode: where the time goes").
// Here, per (device, m bucket, n, k, output type, pointer alignment,
// workspace), cublasLtMatmulAlgoGetHeuristic proposes up to 16 algorithms,
// split-k versions (2, 4; fp32 reduction) of its first four are added where the
// algorithm allows them, and every candidate is timed on the real shape: five
// rounds that launch each candidate once after an L2 flush (weights come from
// HBM in a real step) when the workspace holds the flush region. The lowest
// median wins and is cached for the process. m buckets are powers of two from
// 32 (17..32, 33..64, ...); the plan's algorithm is checked once for every
// exact m it serves (cublasLtMatmulAlgoCheck), else that m takes the
// heuristic's pick.
//
// Never timed inside a CUDA graph capture: the engine calls the variant's
// prepare hook for every shape its op table launches, at start-up, before it
// captures the decode graphs (Model::prepare_kernels). An unplanned shape met
// eagerly is planned at that launch; one met first inside a capture takes the
// heuristic's pick untimed (GemmPlan::timed = false) and is planned at its
// next eager launch.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/base/env_knob.h"
#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/gemm_plan.h"

namespace lantern::kernels {
namespace {

constexpr size_t kAlgoWorkspace = size_t(8) << 20;  // split-k partials of the M <= 512 shapes
constexpr int kHeuristicAlgos = 16;
constexpr int kSplitFrom = 4;  // the heuristic's first candidates get split-k versions
constexpr int kSplits[] = {2, 4};
constexpr int kReps = 5;
constexpr int kMinBucket = 32;

int m_bucket(int m) {
  int b = kMinBucket;
  while (b < m) b *= 2;
  return b;
}

int alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a) a /= 2;
  return a;
}

// Bytes memset before each timed launch: twice the L2, so no weight survives.
size_t flush_bytes() {
  int dev = 0, l2 = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    l2 = 64 << 20;
  }
  return std::max<size_t>(size_t(2) * l2, size_t(64) << 20);
}

struct PlanKey {
  int device, m_bucket, n, k, align;
  bool c_f32;
  size_t workspace;
  auto tied() const { return std::tie(device, n, k, c_f32, m_bucket, align, workspace); }
  bool operator<(const PlanKey& o) const { return tied() < o.tied(); }
};

// Descriptors of one exact problem: row-major c[m, n] = a[m, k] w[n, k]^T is
// the column-major c^T[n, m] = op(w) a^T with op(w) = T, as variant 1 calls it.
// Never copied: cuBLASLt gets pointers to these members.
struct Problem {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t w, a, c;
  Problem(int m, int n, int k, bool c_f32) {
    CUBLAS_CHECK(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&w, CUDA_R_16BF, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&a, CUDA_R_16BF, k, m, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&c, c_f32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n));
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
};

struct Candidate {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  int rank = 0;  // place in the heuristic's order
  bool split_added = false;
};

cublasStatus_t matmul(cublasLtHandle_t h, Problem& p, const Candidate& c, const GemmArgs& g,
                      void* workspace, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(h, &p.op, &one, g.w, &p.w, g.a, &p.a, &zero, g.c, &p.c, g.c, &p.c, &c.algo,
                        c.workspace ? workspace : nullptr, c.workspace, stream);
}

template <class T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS)
    return T{};
  return v;
}

// Split-k versions of a single-split candidate whose algorithm supports them
// with an fp32 reduction, kept when cublasLtMatmulAlgoCheck accepts them
// within the workspace.
void add_split_versions(cublasLtHandle_t h, Problem& p, Candidate base, size_t workspace,
                        std::vector<Candidate>& out) {
  int32_t support = 0;
  uint32_t schemes = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support,
                                        sizeof support, &written) != CUBLAS_STATUS_SUCCESS ||
      !support ||
      cublasLtMatmulAlgoCapGetAttribute(&base.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                        sizeof schemes, &written) != CUBLAS_STATUS_SUCCESS ||
      !(schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ||
      algo_config<int32_t>(base.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1)
    return;
  for (int32_t splits : kSplits) {
    Candidate c = base;
    c.split_added = true;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof scheme) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoCheck(h, &p.op, &p.w, &p.a, &p.c, &p.c, &c.algo, &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > workspace)
      continue;
    c.workspace = check.workspaceSize;
    out.push_back(c);
  }
}

// The heuristic's candidates for `p` (in its order), then the split-k versions.
std::vector<Candidate> candidates(cublasLtHandle_t h, Problem& p, int align, size_t workspace,
                                  bool with_splits) {
  cublasLtMatmulPreferenceOpaque_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  const uint64_t ws = workspace;
  const uint32_t al = static_cast<uint32_t>(align);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &al, sizeof al));
  cublasLtMatmulHeuristicResult_t found[kHeuristicAlgos] = {};
  int got = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h, &p.op, &p.w, &p.a, &p.c, &p.c, &pref, kHeuristicAlgos, found, &got) !=
      CUBLAS_STATUS_SUCCESS)
    got = 0;
  std::vector<Candidate> out;
  for (int i = 0; i < got; ++i)
    if (found[i].state == CUBLAS_STATUS_SUCCESS && found[i].workspaceSize <= workspace)
      out.push_back(Candidate{found[i].algo, found[i].workspaceSize, i, false});
  // LANTERN_LT_SPLIT_FROM (read once): how many of the heuristic's candidates
  // get split-k versions, an experiment knob (more candidates, longer start-up).
  static const size_t split_from = [] {
    const int v = env_int("LANTERN_LT_SPLIT_FROM");
    return size_t(v >= 1 ? v : kSplitFrom);
  }();
  const size_t from_heuristic = std::min<size_t>(out.size(), split_from);
  if (with_splits)
    for (size_t i = 0; i < from_heuristic; ++i) add_split_versions(h, p, out[i], workspace, out);
  return out;
}

struct Events {
  std::vector<cudaEvent_t> e;
  explicit Events(size_t n) : e(n, nullptr) {
    for (auto& ev : e) CUDA_CHECK(cudaEventCreate(&ev));
  }
  ~Events() {
    for (auto ev : e)
      if (ev) CUDA_CHECK_LOG(cudaEventDestroy(ev));
  }
};

// Median microseconds of each candidate over kReps rounds; a round launches
// every candidate once (drift hits all alike), each after an L2 flush when
// `flush` is given. A candidate whose launch fails gets +inf.
std::vector<double> time_candidates(cublasLtHandle_t h, Problem& p, const std::vector<Candidate>& cands,
                                    const GemmArgs& g, void* workspace, void* flush, cudaStream_t stream) {
  const size_t n = cands.size(), flush_n = flush ? flush_bytes() : 0;
  std::vector<char> ok(n);
  for (size_t i = 0; i < n; ++i)  // warm-up: module loads; drops what cannot run here
    ok[i] = matmul(h, p, cands[i], g, workspace, stream) == CUBLAS_STATUS_SUCCESS;
  Events ev(2 * n * kReps);
  for (int r = 0; r < kReps; ++r)
    for (size_t i = 0; i < n; ++i) {
      if (!ok[i]) continue;
      if (flush) CUDA_CHECK(cudaMemsetAsync(flush, r, flush_n, stream));
      cudaEvent_t* e = &ev.e[2 * (r * n + i)];
      CUDA_CHECK(cudaEventRecord(e[0], stream));
      CUBLAS_CHECK(matmul(h, p, cands[i], g, workspace, stream));
      CUDA_CHECK(cudaEventRecord(e[1], stream));
    }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> median(n, std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) continue;
    std::vector<double> us(kReps);
    for (int r = 0; r < kReps; ++r) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[2 * (r * n + i)], ev.e[2 * (r * n + i) + 1]));
      us[r] = ms * 1e3;
    }
    std::sort(us.begin(), us.end());
    median[i] = us[kReps / 2];
  }
  return median;
}

void describe_choice(GemmPlan& rec, const Candidate& c) {
  rec.algo_id = algo_config<int32_t>(c.algo, CUBLASLT_ALGO_CONFIG_ID);
  rec.tile = static_cast<int>(algo_config<uint32_t>(c.algo, CUBLASLT_ALGO_CONFIG_TILE_ID));
  rec.stages = static_cast<int>(algo_config<uint32_t>(c.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
  rec.split_k = std::max(1, algo_config<int32_t>(c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  rec.reduction = static_cast<int>(algo_config<uint32_t>(c.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  rec.swizzle = static_cast<int>(algo_config<uint32_t>(c.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  rec.custom = static_cast<int>(algo_config<uint32_t>(c.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  rec.cluster = algo_config<uint16_t>(c.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  rec.workspace = c.workspace;
  rec.rank = c.rank;
  rec.split_added = c.split_added;
}

struct Plan {
  Candidate choice;
  GemmPlan record;
};

// One exact m's descriptors and what it runs (the plan's algorithm when
// cublasLtMatmulAlgoCheck accepts it for this m, else the heuristic's pick).
struct Exact {
  std::unique_ptr<Problem> problem;
  cublasLtMatmulAlgo_t planned{};  // the plan it was derived from (re-derived when that changes)
  std::optional<Candidate> run;    // none: variant 1
};

// Process-wide plans and cuBLASLt handles (one per device), behind one mutex.
// Created once and never destroyed: the CUDA runtime may be gone at exit.
class Planner {
 public:
  static Planner& get() {
    static Planner* planner = new Planner;
    return *planner;
  }
  cublasLtHandle_t handle(int device);
  std::optional<Plan> find(const PlanKey& key);
  std::optional<Plan> make(const GemmArgs& g, const LaunchCtx& ctx, const PlanKey& key, bool timed);
  std::optional<Candidate> exact(const PlanKey& key, const GemmArgs& g, const Plan& plan, Problem** problem);
  std::vector<GemmPlan> records();
  bool has_pins() {
    std::lock_guard<std::mutex> lock(mu_);
    return !pins_.empty();
  }
  void pin(std::vector<GemmPlan> plans) {
    std::lock_guard<std::mutex> lock(mu_);
    pins_ = std::move(plans);
  }
  // The candidate with a matching pin's configuration, if any.
  std::optional<size_t> pinned(const PlanKey& key, const std::vector<Candidate>& cands, GemmPlan* pin);

 private:
  std::mutex mu_;
  std::map<int, cublasLtHandle_t> handles_;
  std::map<PlanKey, Plan> plans_;
  std::map<std::pair<PlanKey, int>, Exact> exact_;
  std::vector<GemmPlan> pins_;
};

std::optional<size_t> Planner::pinned(const PlanKey& key, const std::vector<Candidate>& cands, GemmPlan* pin) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const GemmPlan& p : pins_) {
    if (p.m_bucket != key.m_bucket || p.n != key.n || p.k != key.k || p.c_f32 != key.c_f32 ||
        p.align != key.align || p.workspace_limit != key.workspace)
      continue;
    for (size_t i = 0; i < cands.size(); ++i) {
      GemmPlan c;
      describe_choice(c, cands[i]);
      if (c.config() == p.config()) {
        *pin = p;
        return i;
      }
    }
  }
  return std::nullopt;
}

cublasLtHandle_t Planner::handle(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  cublasLtHandle_t& h = handles_[device];
  if (!h) CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

std::optional<Plan> Planner::find(const PlanKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plans_.find(key);
  if (it == plans_.end()) return std::nullopt;
  return it->second;
}

std::vector<GemmPlan> Planner::records() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GemmPlan> out;
  for (const auto& [key, plan] : plans_) out.push_back(plan.record);
  return out;
}

// Plans `key` from this launch's arguments (its m is the timed one). `timed`
// false: inside a capture, the heuristic's pick without launching anything.
std::optional<Plan> Planner::make(const GemmArgs& g, const LaunchCtx& ctx, const PlanKey& key, bool timed) {
  const cublasLtHandle_t h = handle(key.device);
  Problem p(g.m, g.n, g.k, g.c_f32);
  const std::vector<Candidate> cands = candidates(h, p, key.align, key.workspace, timed || has_pins());
  if (cands.empty()) return std::nullopt;
  Plan plan;
  GemmPlan& rec = plan.record;
  rec.device = key.device;
  rec.m_bucket = key.m_bucket;
  rec.m_timed = g.m;
  rec.n = g.n;
  rec.k = g.k;
  rec.c_f32 = g.c_f32;
  rec.align = key.align;
  rec.workspace_limit = key.workspace;
  size_t best = 0;
  GemmPlan pin;
  if (const std::optional<size_t> i = pinned(key, cands, &pin)) {
    best = *i;
    rec.us = pin.us;
    rec.heuristic_us = pin.heuristic_us;
    rec.candidates = pin.candidates;
    rec.cold_l2 = pin.cold_l2;
    rec.pinned = true;
  } else if (timed) {
    const bool cold = ctx.workspace_bytes >= kAlgoWorkspace + flush_bytes();
    void* flush = cold ? static_cast<char*>(ctx.workspace) + kAlgoWorkspace : nullptr;
    const std::vector<double> us = time_candidates(h, p, cands, g, ctx.workspace, flush, ctx.stream);
    best = static_cast<size_t>(std::min_element(us.begin(), us.end()) - us.begin());
    if (!std::isfinite(us[best])) return std::nullopt;
    rec.us = us[best];
    rec.heuristic_us = us[0];
    rec.candidates = static_cast<int>(std::count_if(us.begin(), us.end(), [](double t) { return std::isfinite(t); }));
    rec.timed = true;
    rec.cold_l2 = cold;
  }
  plan.choice = cands[best];
  describe_choice(rec, plan.choice);
  std::lock_guard<std::mutex> lock(mu_);
  plans_[key] = plan;
  return plan;
}

// What exact m runs under `plan`; *problem gets its descriptors.
std::optional<Candidate> Planner::exact(const PlanKey& key, const GemmArgs& g, const Plan& plan,
                                        Problem** problem) {
  std::lock_guard<std::mutex> lock(mu_);
  Exact& ex = exact_[{key, g.m}];
  if (!ex.problem || std::memcmp(&ex.planned, &plan.choice.algo, sizeof ex.planned) != 0) {
    if (!ex.problem) ex.problem = std::make_unique<Problem>(g.m, g.n, g.k, g.c_f32);
    ex.planned = plan.choice.algo;
    ex.run.reset();
    cublasLtMatmulHeuristicResult_t check{};
    Candidate c = plan.choice;
    const cublasLtHandle_t h = handles_.at(key.device);
    Problem& p = *ex.problem;
    if (cublasLtMatmulAlgoCheck(h, &p.op, &p.w, &p.a, &p.c, &p.c, &c.algo, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= key.workspace) {
      c.workspace = check.workspaceSize;
      ex.run = c;
    } else {
      const std::vector<Candidate> fallback = candidates(h, p, key.align, key.workspace, false);
      if (!fallback.empty()) ex.run = fallback.front();
    }
  }
  *problem = ex.problem.get();
  return ex.run;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

PlanKey key_of(const GemmArgs& g, const LaunchCtx& ctx) {
  PlanKey key{};
  CUDA_CHECK(cudaGetDevice(&key.device));
  key.m_bucket = m_bucket(g.m);
  key.n = g.n;
  key.k = g.k;
  key.c_f32 = g.c_f32;
  key.align = std::min({alignment(g.a), alignment(g.w), alignment(g.c)});
  key.workspace = ctx.workspace ? std::min(ctx.workspace_bytes, kAlgoWorkspace) : 0;
  return key;
}

// The plan for g's shape: made now (timed) when missing or untimed outside a
// capture; inside one, the untimed heuristic pick when missing. A pinned plan
// (`lantern rerun`: the recorded run's choice) is as final as a timed one: the
// run it came from used its timed plan for every m of the bucket, so the rerun
// must too -- re-making it at another m re-timed the candidates whenever the
// pinned configuration was not among that m's heuristic candidates, and the
// rerun could then launch another kernel than the run (different rounding,
// flipped near-tie tokens in `lantern rerun --check`).
std::optional<Plan> plan_for(const GemmArgs& g, const LaunchCtx& ctx, const PlanKey& key) {
  Planner& planner = Planner::get();
  std::optional<Plan> plan = planner.find(key);
  if (plan && (plan->record.timed || plan->record.pinned)) return plan;
  const bool in_capture = capturing(ctx.stream);
  if (plan && in_capture) return plan;
  return planner.make(g, ctx, key, !in_capture);
}

void check_lt(const GemmArgs& g, const LaunchCtx& ctx) {
  LANTERN_CHECK(g.m >= 0 && g.n > 0 && g.k > 0, "gemm.lt_planned: bad shape m=%d n=%d k=%d", g.m, g.n, g.k);
  LANTERN_CHECK(ctx.cublas != nullptr, "gemm.lt_planned: LaunchCtx has no cuBLAS handle (variant 1 is its fallback)");
}

}  // namespace

size_t gemm_lt_workspace_bytes(const WorkspaceShape&) { return kAlgoWorkspace + flush_bytes(); }

void gemm_lt_launch(const GemmArgs& g, const LaunchCtx& ctx) {
  check_lt(g, ctx);
  if (g.m == 0) return;
  const PlanKey key = key_of(g, ctx);
  const std::optional<Plan> plan = plan_for(g, ctx, key);
  if (!plan) return gemm_cublas_launch(g, ctx);  // cuBLASLt offers nothing for this shape
  Problem* problem = nullptr;
  const std::optional<Candidate> run = Planner::get().exact(key, g, *plan, &problem);
  if (!run) return gemm_cublas_launch(g, ctx);
  CUBLAS_CHECK(matmul(Planner::get().handle(key.device), *problem, *run, g, ctx.workspace, ctx.stream));
}

void gemm_lt_prepare(const GemmArgs& g, const LaunchCtx& ctx) {
  check_lt(g, ctx);
  if (g.m == 0 || capturing(ctx.stream)) return;  // never time inside a capture
  (void)plan_for(g, ctx, key_of(g, ctx));
}

std::vector<GemmPlan> gemm_plans() { return Planner::get().records(); }

void pin_gemm_plans(std::vector<GemmPlan> plans) { Planner::get().pin(std::move(plans)); }

std::string GemmPlan::describe() const {
  return strformat("m<=%-4d n=%-6d k=%-5d %s: algo %d tile %d stages %d split %d%s swizzle %d custom %d "
                   "cluster %d ws %zu KiB | %s%.1f us, heuristic's pick %.1f us (rank %d of %d)",
                   m_bucket, n, k, c_f32 ? "f32 " : "bf16", algo_id, tile, stages, split_k,
                   split_added ? " (added)" : "", swizzle, custom, cluster, workspace >> 10,
                   pinned ? "pinned " : timed ? "" : "untimed ", us, heuristic_us, rank, candidates);
}

}  // namespace lantern::kernels
