// `lantern sweep EXP.json --param PATH=V1,V2 ...`: a grid of runs under one
// sweep directory, with sweep.csv (one row per point).
#include <cstdio>
#include <fstream>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/experiment_runner.h"
#include "harness/experiment/sweep.h"
#include "harness/experiment/table.h"

namespace lantern::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kSweepMetrics[] = {"output_throughput", "request_throughput",   "ttft_ms.p50",
                               "ttft_ms.p99",       "tpot_ms.p50",          "itl_ms.p99",
                               "e2e_ms.p50",        "admission_wait_ms.p50"};

std::string safe(const std::string& label) {
  std::string out;
  for (char c : label)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '=' || c == '-' || c == '.' ||
            c == '_')
               ? c
               : '_';
  return out;
}

int cmd_sweep(const std::vector<std::string>& argv) {
  Args args(argv, {"--param", "--set", "--out"}, {"--quiet"});
  LANTERN_CHECK(args.positional().size() == 1,
                "expected one experiment file (fix: lantern sweep EXP.json "
                "--param limits.max_seqs=1,2,4)");
  std::vector<std::string> command = argv;
  command.insert(command.begin(), "sweep");
  return run_sweep(args.positional()[0], args.get_all("--param"), args.get_all("--set"),
                   args.get_or("--out", ""), args.flag("--quiet"), command);
}

}  // namespace

int run_sweep(const fs::path& file, const std::vector<std::string>& params,
              const std::vector<std::string>& sets, fs::path sweep_dir, bool quiet,
              const std::vector<std::string>& command) {
  json doc = experiment::load_json_file(file);
  std::vector<experiment::SweepParam> grid;
  for (const std::string& p : params) grid.push_back(experiment::parse_sweep_param(p));
  for (auto& p : experiment::sweep_params_of(doc)) grid.push_back(std::move(p));
  LANTERN_CHECK(!grid.empty(),
                "%s: nothing to sweep (fix: give --param PATH=V1,V2 or a \"sweep\" section)",
                file.c_str());
  doc.erase("sweep");
  const auto base_sets = overrides_from(sets);
  const std::vector<experiment::SweepPoint> points = experiment::expand_grid(grid);
  // Every point is validated before the first one runs.
  std::vector<experiment::Experiment> exps;
  for (const auto& pt : points) {
    auto all = base_sets;
    all.insert(all.end(), pt.overrides.begin(), pt.overrides.end());
    exps.push_back(experiment::resolve(doc, file.string(), all));
  }
  const std::string name = exps.front().name();
  if (sweep_dir.empty()) sweep_dir = default_run_dir(name, "-sweep");
  fs::create_directories(sweep_dir);
  experiment::Table table;
  table.header = {"point"};
  for (const auto& p : grid) table.header.push_back(p.path);
  for (const char* m : kSweepMetrics) table.header.push_back(m);
  table.header.push_back("run_dir");
  for (size_t i = 0; i < points.size(); ++i) {
    if (!quiet)
      std::fprintf(stderr, "lantern sweep: point %zu/%zu: %s\n", i + 1, points.size(),
                   points[i].label.c_str());
    experiment::Experiment& e = exps[i];
    e.resolved["name"] = name + "-" + safe(points[i].label);
    RunOptions o;
    o.out_dir = sweep_dir / strformat("p%03zu-%s", i, safe(points[i].label).c_str());
    o.command = command;
    o.quiet = quiet;
    o.print_summary = false;
    RunOutcome out = run_experiment(e, o);
    std::vector<std::string> row = {std::to_string(i)};
    for (const auto& ov : points[i].overrides)
      row.push_back(ov.value.is_string() ? ov.value.get<std::string>() : ov.value.dump());
    for (const char* m : kSweepMetrics)
      row.push_back(
          out.summary.contains(m) ? strformat("%.6g", out.summary[m]["median"].get<double>()) : "");
    row.push_back(out.dir.string());
    table.rows.push_back(row);
  }
  std::ofstream csv(sweep_dir / "sweep.csv");
  LANTERN_CHECK(csv, "cannot write %s/sweep.csv", sweep_dir.c_str());
  csv << experiment::render(table, experiment::TableFormat::csv);
  std::fputs(experiment::render(table, experiment::TableFormat::text).c_str(), stdout);
  std::printf(
      "sweep directory: %s (sweep.csv, one run directory per point)\nnext: lantern compare "
      "%s/p000-* %s/p001-*\n",
      sweep_dir.c_str(), sweep_dir.c_str(), sweep_dir.c_str());
  return 0;
}

LANTERN_COMMAND("sweep",
                "run a grid of experiment points (--param), one run directory each + sweep.csv",
                cmd_sweep);

}  // namespace lantern::cli
