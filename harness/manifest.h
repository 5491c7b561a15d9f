#pragma once
// Provenance for run manifests: git commit and dirty flag, build, host, GPU,
// driver and library versions. Everything here is gathered once per run,
// never on the hot path.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lantern::harness {

// {"commit", "dirty", "source"}: `git` is run in the source tree the binary
// was configured from (LANTERN_SOURCE_DIR); when that fails (no git, tree
// copied elsewhere) the configure-time commit is used and "dirty" is null.
nlohmann::json git_info();

// {"type", "flags", "instrumentation", "version"} from build_info.h.
nlohmann::json build_info();

// {"hostname", "os", "kernel", "cpu", "cpu_cores", "memory_bytes"}.
nlohmann::json host_info();

// The GPU `device` through CUDA runtime attributes: name, uuid, compute
// capability, SMs, memory, SM and memory clocks (kHz), bus width, L2.
// Throws lantern::Error naming the failed call.
nlohmann::json gpu_info(int device);

// {"cuda_runtime", "cuda_driver", "cublas", "cupti", "cupti_api"}: versions as
// "MAJOR.MINOR[.PATCH]" strings; a library whose version cannot be read
// (no driver) gets null. `query_cupti` false skips CUPTI (cpu runs).
nlohmann::json library_versions(bool query_cupti);

// {"NAME": "value"} for every LANTERN_* environment variable of this process
// (the experiment knobs docs/kernels.md lists, read once per process by the
// kernels and the engine), sorted by name: the manifest's "environment".
nlohmann::json lantern_environment();

// Sets each recorded LANTERN_* variable (a manifest's "environment") in this
// process before anything reads it, so a rerun runs with the recorded knobs.
// Returns one note per variable whose value here differed (the recorded one
// wins) or that is set here but was not recorded (kept); empty when all match.
std::vector<std::string> apply_recorded_environment(const nlohmann::json& recorded);

}  // namespace lantern::harness
