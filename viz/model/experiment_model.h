#pragma once
// The experiment panel's data: flattened configs and metrics ("limits.max_seqs"
// -> value), the diff of two runs, and sweeps (sibling runs whose configs
// differ in one parameter, each metric against that parameter).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lantern::view {

// Leaves of `j` by dotted path ("gpu.name"); arrays of scalars stay one leaf.
std::map<std::string, nlohmann::json> flatten(const nlohmann::json& j, const std::string& prefix = "");

// One line on the GPU's clocks over a run: runfmt::clocks_line, with
// " -- THROTTLED" when the run ran throttled ("SM 1980 -> 1860 MHz (max 1980),
// power cap 412.5 ms, thermal 0.0 ms of 2500 ms -- THROTTLED"), "not read
// (why)", or "" when the run has none.
std::string run_clocks_line(const nlohmann::json& manifest);

struct DiffRow {
  std::string key;
  std::string a, b;         // printed values ("" when absent)
  std::optional<double> ratio;  // b / a when both are numbers and a != 0
};
// Keys whose values differ (or exist in only one), sorted by key.
std::vector<DiffRow> diff_json(const nlohmann::json& a, const nlohmann::json& b);

// Numeric leaves of both (metrics side by side), sorted by key.
std::vector<DiffRow> side_by_side_numbers(const nlohmann::json& a, const nlohmann::json& b);

struct SweepPoint {
  std::string run;               // directory name
  nlohmann::json config;         // manifest "config"
  nlohmann::json metrics;
};
struct Sweep {
  std::vector<SweepPoint> points;
  std::vector<std::string> parameters;  // config keys that vary, numeric first
  std::vector<std::string> metrics;     // numeric metric keys present in every point
  std::vector<std::string> errors;      // runs that could not be read
};
// Reads manifest.json + metrics.json of every run under `dir`.
Sweep load_sweep(const std::filesystem::path& dir);

// x (parameter) and y (metric) of every point that has both as numbers, sorted by x.
std::vector<std::pair<double, double>> sweep_series(const Sweep& s, const std::string& parameter,
                                                    const std::string& metric);

}  // namespace lantern::view
