#pragma once
// Sweeps: a grid of `--set` overrides. `--param limits.max_seqs=1,2,4
// --param kernels.attention_decode=2,3` gives 6 points, the last parameter
// varying fastest; an experiment's own "sweep" section adds its parameters
// after the command line's.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/experiment/experiment.h"

namespace lantern::experiment {

struct SweepParam {
  std::string path;
  std::vector<nlohmann::json> values;
};

// "a.b=1,2,4" (each value JSON when it parses, else a string). Throws naming
// --param and the fix.
SweepParam parse_sweep_param(const std::string& text);
// The parameters of an experiment document's "sweep" section.
std::vector<SweepParam> sweep_params_of(const nlohmann::json& doc);

struct SweepPoint {
  std::vector<Override> overrides;  // one per parameter
  std::string label;                // "max_seqs=1,attention_decode=2" (last path components)
};
// The cartesian product; one point with no overrides when params is empty.
std::vector<SweepPoint> expand_grid(const std::vector<SweepParam>& params);

}  // namespace lantern::experiment
