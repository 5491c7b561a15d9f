// libFuzzer target: an experiment file, optionally followed by
// "\n--8<--\n" and `--set PATH=VALUE` texts one per line, through what
// `lantern run EXP.json --dry-run` does before it loads a model: read the
// file, parse the overrides, resolve (overrides, validation, defaults,
// contradictions), the sweep grid's points, the model checks (against a
// fixed 2,048-position model with two kernel families) and the workload
// (a byte-level stand-in tokenizer, vocabulary 300).
//
// Beyond "only lantern::Error": every line of an ExperimentError is one line;
// an accepted workload's prompts fit the context, their ids lie in the
// vocabulary and equal the file's "ids" when it gave them, output lengths
// are >= 1, arrival times start at 0 and never decrease.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/experiment/experiment.h"
#include "harness/experiment/sweep.h"
#include "harness/experiment/workload.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace lantern;
using namespace lantern::experiment;
using nlohmann::json;

constexpr int kModelPositions = 2048;
constexpr int kVocab = 300;
constexpr int kBos = 256;

void check_lines(const ExperimentError& e) {
  if (e.lines().empty()) __builtin_trap();
  for (const std::string& line : e.lines()) fuzz::check_message(Error(line));
}

// Like expect_clean, with ExperimentError's lines checked one by one.
template <class F>
void expect_clean_lines(F&& f) {
  fuzz::expect_clean([&] {
    try {
      f();
    } catch (const ExperimentError& e) {
      check_lines(e);
    }
  });
}

// Bytes as ids (BOS first); chat is "role: content\n" per message.
TextEncoder byte_encoder() {
  TextEncoder enc;
  auto bytes = [](const std::string& s) {
    std::vector<int32_t> ids{kBos};
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  };
  auto render = [](const std::vector<std::pair<std::string, std::string>>& m) {
    std::string s;
    for (const auto& [role, content] : m) s += role + ": " + content + "\n";
    return s;
  };
  enc.encode = bytes;
  enc.render_chat = render;
  enc.encode_chat = [=](const auto& m) { return bytes(render(m)); };
  return enc;
}

// What the resolved experiment's own "ids" prompts say, to compare.
void check_workload(const Experiment& e, const std::vector<WorkItem>& items, int max_context) {
  const json& w = e.resolved["workload"];
  double last = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = items[i];
    if (it.prompt.empty() || static_cast<int>(it.prompt.size()) >= max_context) __builtin_trap();
    if (it.max_new_tokens < 1) __builtin_trap();
    for (int32_t id : it.prompt)
      if (id < 0 || id >= kVocab) __builtin_trap();
    if (it.arrival_s < last || (i == 0 && it.arrival_s != 0)) __builtin_trap();
    last = it.arrival_s;
    if (w["kind"] == "prompts" && w["prompts"][i].is_object() && w["prompts"][i].contains("ids")) {
      const json& ids = w["prompts"][i]["ids"];
      if (ids.size() != it.prompt.size()) __builtin_trap();
      for (size_t k = 0; k < ids.size(); ++k)
        if (ids[k].get<int64_t>() != it.prompt[k]) __builtin_trap();
    }
    if (w["kind"] == "prompts" && w["prompts"][i].is_object() &&
        w["prompts"][i].contains("max_new_tokens") &&
        w["prompts"][i]["max_new_tokens"].get<int64_t>() != it.max_new_tokens)
      __builtin_trap();
  }
}

// run_experiment's pre-model part, with fixed model facts.
void dry_run(const Experiment& e) {
  ModelFacts facts;
  facts.max_position_embeddings = kModelPositions;
  facts.kernel_variants = {{"attention_decode", {"seed", "1", "split_k", "2"}},
                           {"rmsnorm", {"seed", "1"}}};
  if (auto issues = check_against(e, facts); !issues.empty()) throw ExperimentError(issues);
  const json& w = e.resolved["workload"];
  // A requests file is another format (and any path); a huge synthetic
  // workload is the user's choice, not a bug: both are left out here.
  if (w["kind"] == "requests" || w["count"].get<int64_t>() > 128) return;
  Experiment bounded = e;
  int max_context = e.resolved["limits"]["max_context"];
  if (max_context > kModelPositions) max_context = kModelPositions;  // limits_of
  bounded.resolved["limits"]["max_context"] = max_context;
  std::vector<WorkItem> items = build_workload(bounded, byte_encoder(), {kVocab, kBos, 256});
  check_workload(bounded, items, max_context);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parts = fuzz::split(input, "\n--8<--\n", 2);
  const auto file = fuzz::scratch() / "exp.json";
  fuzz::write_file(file, parts[0]);
  expect_clean_lines([&] {
    json doc = load_json_file(file);
    std::vector<Override> sets;
    if (parts.size() > 1)
      for (std::string_view line : fuzz::split(parts[1], "\n", 8))
        sets.push_back(parse_override(std::string(line)));
    Experiment e = resolve(doc, file.string(), sets);
    dry_run(e);
    // `lantern run` of a sweep resolves every point first (run_sweep).
    std::vector<SweepParam> grid = sweep_params_of(doc);
    size_t points = 1;
    for (const SweepParam& p : grid)
      points = std::min<size_t>(17, points * std::min<size_t>(17, p.values.size()));
    if (grid.empty() || points > 16) return;
    doc.erase("sweep");
    for (const SweepPoint& pt : expand_grid(grid)) {
      std::vector<Override> all = sets;
      all.insert(all.end(), pt.overrides.begin(), pt.overrides.end());
      expect_clean_lines([&] { dry_run(resolve(doc, file.string(), all)); });
    }
  });
  return 0;
}
