// libFuzzer target: every file of a run directory. The input is split at
// "\n--8<--\n" into manifest.json, metrics.json, trace.json, kernels.csv,
// memory.json, kv.json and outputs.jsonl (a missing part: the file is
// absent); RunReader::open must load it or throw one lantern::Error line.
#include <cstddef>
#include <cstdint>

#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  namespace files = runfmt::files;
  static const char* names[] = {files::kManifest, files::kMetrics, files::kTrace, files::kKernels,
                                files::kMemory,   files::kKv,      files::kOutputs};
  const auto parts = fuzz::split({reinterpret_cast<const char*>(data), size}, "\n--8<--\n", 7);
  const auto dir = fuzz::scratch() / "run";
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < 7; ++i) {
    if (i < parts.size())
      fuzz::write_file(dir / names[i], parts[i]);
    else
      std::filesystem::remove(dir / names[i]);
  }
  fuzz::expect_clean([&] {
    runfmt::Run run = runfmt::RunReader::open(dir);
    runfmt::check_trace(run.trace);
  });
  return 0;
}
