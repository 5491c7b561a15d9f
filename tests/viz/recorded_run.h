#pragma once
// A run recorded on the CPU backend by `lantern run` (the tiny synthetic
// model; 4 requests of token ids, 3 slots, a 16-block KV pool: one request
// waits for a slot), once per test process (about two seconds). Its manifest
// holds the resolved experiment and the kernel variant list (run format 1.3).
#include <filesystem>
#include <string>

namespace lantern::test {

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};
CommandResult run_command(const std::string& command);
std::filesystem::path built_binary(const char* name);  // BUILD/bin/NAME

struct RecordedCpuRun {
  std::filesystem::path dir;         // the run directory
  std::filesystem::path experiment;  // the experiment file it ran
  std::filesystem::path model;       // the tiny model directory
};
const RecordedCpuRun& recorded_cpu_run();

}  // namespace lantern::test
