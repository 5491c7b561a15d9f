// `lantern compare RUN_A RUN_B [...]`: metrics, kernel times and the config
// diff of several runs side by side (harness/experiment/compare.h).
#include <cstdio>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/experiment/compare.h"

namespace lantern::cli {

namespace {

int cmd_compare(const std::vector<std::string>& argv) {
  Args args(argv, {}, {"--csv", "--markdown", "--no-kernels"});
  LANTERN_CHECK(args.positional().size() >= 2,
                "expected at least two run directories (fix: lantern compare "
                "RUN_A RUN_B; lantern compare --help)");
  LANTERN_CHECK(!(args.flag("--csv") && args.flag("--markdown")),
                "--csv and --markdown exclude each other "
                "(fix: pick one)");
  const auto format = args.flag("--csv")        ? experiment::TableFormat::csv
                      : args.flag("--markdown") ? experiment::TableFormat::markdown
                                                : experiment::TableFormat::text;
  std::vector<experiment::CompareRun> runs;
  for (const std::string& dir : args.positional())
    runs.push_back(experiment::load_compare_run(dir));
  experiment::Comparison c = experiment::compare_runs(runs);
  std::vector<const experiment::Table*> tables = {&c.metrics};
  if (!args.flag("--no-kernels") && !c.ops.header.empty()) {
    tables.push_back(&c.ops);
    tables.push_back(&c.families);
    tables.push_back(&c.path);
  }
  tables.push_back(&c.config);
  for (size_t i = 0; i < tables.size(); ++i) {
    if (format == experiment::TableFormat::csv)
      std::printf("%s# %s\n", i ? "\n" : "", tables[i]->title.c_str());
    else if (i)
      std::printf("\n");
    std::fputs(experiment::render(*tables[i], format).c_str(), stdout);
  }
  return 0;
}

}  // namespace

LANTERN_COMMAND("compare", "runs side by side: metrics, kernel times, noise marks, config diff",
                cmd_compare);

}  // namespace lantern::cli
