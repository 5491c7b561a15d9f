// `lantern commbench --tp N`: all_reduce bus bandwidth per message size over
// the same launcher and communicator a tensor-parallel run uses (one process
// per GPU, NCCL on cuda; the host communicator on cpu). The reference the
// `all_reduce` op's bandwidth in `lantern inspect` compares against.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/device.h"
#include "harness/cli/command.h"
#include "harness/cli/commbench.h"
#include "harness/cli/engine_args.h"
#include "harness/cli/tp_launch.h"
#include "kernels/base/errors.h"

namespace lantern::cli {
namespace {

std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    LANTERN_CHECK(end && *end == '\0' && v >= 4 && v <= (1ull << 34),
                  "--sizes entry '%s' must be a byte count in [4, 2^34]", item.c_str());
    out.push_back(static_cast<size_t>(v));
  }
  LANTERN_CHECK(!out.empty(), "--sizes needs at least one byte count");
  return out;
}

// 8 KiB .. 256 MiB by 4x: a decode step's messages (hidden x batch x 2 bytes) sit at the low end.
constexpr const char* kDefaultSizes =
    "8192,32768,131072,524288,2097152,8388608,33554432,134217728,268435456";

int cmd_commbench(const std::vector<std::string>& argv) {
  Args args(argv, {"--tp", "--device", "--gpu", "--sizes", "--iters", "--out"}, {"--quiet"});
  const int tp = static_cast<int>(args.get_int("--tp", 2, 1, 1024));
  const kernels::Backend backend = backend_from_args(args);
  const int gpu = gpu_from_args(args);
  const std::vector<size_t> sizes = parse_sizes(args.get_or("--sizes", kDefaultSizes));
  const int iters = static_cast<int>(args.get_int("--iters", 20, 1, 100000));
  if (backend == kernels::Backend::cuda) {
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) (void)cudaGetLastError();
    LANTERN_CHECK(gpu + tp <= gpus, "--tp %d needs %d GPUs but found %d: lower --tp", tp, tp, gpus);
  }
  auto& group = current_tp_group();
  group = TpGroup::launch(tp);
  nlohmann::json sz = sizes;
  const nlohmann::json setup = {{"mode", "commbench"},
                                {"backend", kernels::backend_name(backend)},
                                {"gpu", gpu},
                                {"sizes", sz},
                                {"iters", iters}};
  Communicator* comm = group->connect(setup, backend, gpu);
  const auto paths = run_commbench_paths(*comm, backend, gpu, sizes, iters);
  nlohmann::json by_path = nlohmann::json::object();
  for (const auto& p : paths) {
    std::printf("all_reduce over %d rank%s (%s communicator, path %s, %s), median of %d calls each\n", tp,
                tp == 1 ? "" : "s", comm->kind(), p.path.c_str(), kernels::backend_name(backend), iters);
    std::printf("  %14s %12s %14s %14s %14s\n", "bytes", "median us", "algbw GB/s", "busbw GB/s",
                backend == kernels::Backend::cuda ? "in graph us" : "");
    for (const auto& r : p.rows) {
      std::printf("  %14zu %12.2f %14.2f %14.2f", r.bytes, r.us, r.algbw_gbs, r.busbw_gbs);
      if (backend == kernels::Backend::cuda) std::printf(" %14.2f", r.graph_us);
      std::printf("\n");
    }
    by_path[p.path] = commbench_json(p.rows);
  }
  if (auto out = args.get("--out")) {
    std::ofstream f(*out);
    LANTERN_CHECK(f, "cannot write --out %s", out->c_str());
    f << nlohmann::json{{"world", tp},
                        {"communicator", comm->kind()},
                        {"backend", kernels::backend_name(backend)},
                        {"rows", commbench_json(paths.front().rows)},
                        {"paths", by_path}}
             .dump(1)
      << "\n";
  }
  return 0;
}

}  // namespace
LANTERN_COMMAND("commbench",
                "all_reduce bandwidth per message size over the --tp launcher (NCCL on cuda)",
                cmd_commbench);
}  // namespace lantern::cli
