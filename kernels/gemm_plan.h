#pragma once
// gemm.6's per-shape cuBLASLt plans (kernels/cuda/gemm_lt.cpp): which
// algorithm was measured fastest for each shape, as the run manifest records
// them (config.gemm_plans) and `lantern bench --verbose` prints them. No CUDA
// header: the engine and the harness read these without the CUDA include path.
#include <cstddef>
#include <string>
#include <vector>

namespace lantern::kernels {

struct GemmPlan {
  // The shape: c[m, n] = a[m, k] w[n, k]^T with m in (m_bucket / 2, m_bucket]
  // (the 32 bucket serves m = 17..32; m <= 16 runs the GEMV and has no plan).
  int device = 0;
  int m_bucket = 0;
  int m_timed = 0;       // m of the launch the candidates were timed on
  int n = 0, k = 0;
  bool c_f32 = false;    // fp32 output (logits)
  int align = 0;         // smallest byte alignment of a, w and c (<= 256) it was made for
  size_t workspace_limit = 0;  // workspace bytes the candidates could use
  // The choice, in cublasLt.h's terms (cublasLtMatmulTile_t, cublasLtMatmulStages_t,
  // cublasLtReductionScheme_t, cublasLtClusterShape_t ids).
  int algo_id = -1, tile = 0, stages = 0, split_k = 1, reduction = 0, swizzle = 0, custom = 0,
      cluster = 0;
  size_t workspace = 0;  // bytes the choice needs
  int candidates = 0;    // algorithms timed
  int rank = 0;          // the choice's place in the heuristic's order (0: the heuristic's pick)
  bool split_added = false;  // a split-k variant we added to the heuristic's candidate
  double us = 0;             // median time of the choice
  double heuristic_us = 0;   // median time of the heuristic's first candidate
  bool timed = false;    // false: met first inside a graph capture, the heuristic's pick untimed
  bool cold_l2 = false;  // each timed launch ran after an L2 flush (weights from HBM)

  std::string describe() const;  // one line for `lantern bench --verbose`
};

// Every plan this process made, ordered by (device, n, k, c_f32, m_bucket).
std::vector<GemmPlan> gemm_plans();

}  // namespace lantern::kernels
