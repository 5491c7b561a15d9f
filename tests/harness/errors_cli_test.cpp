// The catalogue of bad inputs (docs/errors.md), through the built `lantern`
// binary: every case exits with status 1 (never a signal, never an uncaught
// exception's abort) and prints exactly one line, "lantern CMD: error: ...",
// holding the documented message. With LANTERN_ERRORS_TABLE=FILE set, the
// actual lines are written there as the Markdown rows of docs/errors.md.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "engine/synth.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  int status = -1;      // exit status; -1 when killed by a signal
  std::string output;   // stdout + stderr
};

Outcome run_lantern(const std::string& args, const std::string& stdin_text = "") {
  fs::path bin = fs::path(LANTERN_BINARY_DIR) / "bin" / "lantern";
  fs::path in = test::scratch_dir("errors-cli-stdin") / "stdin";
  std::ofstream(in, std::ios::binary) << stdin_text;
  std::string command = bin.string() + " " + args + " < " + in.string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  Outcome o;
  if (!pipe) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) o.output.append(buf, n);
  int status = pclose(pipe);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

// A fresh copy of a micro model (vocab 64, hidden 16, 2 layers: files of a
// few KB, so every case gets its own) with a small byte-level BPE tokenizer.
fs::path fresh_model(const std::string& name) {
  static const fs::path base = [] {
    auto d = test::scratch_dir("errors-cli-base");
    ModelConfig cfg = test::micro_config({});
    std::ofstream(d / "config.json") << cfg.to_json().dump(1);
    SynthOptions opt;
    opt.seed = 3;
    write_synthetic_weights(cfg, d / "model.safetensors", opt);
    fs::copy_file(test::test_data_dir() / "fuzz/corpus/tokenizer_load/llama3_mini.json",
                  d / "tokenizer.json", fs::copy_options::overwrite_existing);
    return d;
  }();
  auto d = test::scratch_dir("errors-cli-" + name);
  fs::remove_all(d);
  fs::copy(base, d, fs::copy_options::recursive);
  return d;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }
void write_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(1); }

// Rewrites model.safetensors with `edit` applied to its header JSON (data kept).
void edit_header(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path p = dir / "model.safetensors";
  SafetensorsFile f = read_safetensors_header(p);
  std::ifstream in(p, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  nlohmann::json h = nlohmann::json::parse(all.substr(8, f.header_bytes));
  edit(h);
  std::string text = h.dump();
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << prefix << text << all.substr(f.data_start);
}

const char* kGen = "generate --device cpu --quiet --prompt-ids 1,2,3 --max-new-tokens 1 --model ";

struct Case {
  std::string name;                                 // row of docs/errors.md
  std::function<std::string(const fs::path&)> setup;  // -> the arguments
  std::string message;                              // substring of the one error line
  std::string stdin_text = {};
};

void add(std::vector<Case>& c, Case k) { c.push_back(std::move(k)); }

std::vector<Case> cases() {
  std::vector<Case> c;
  auto gen = [](const fs::path& d) { return kGen + d.string(); };
  add(c, {"truncated model.safetensors", [&](const fs::path& d) {
                 fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
                 return gen(d);
               }, "run past the end of the data area"});
  add(c, {"corrupted header length", [&](const fs::path& d) {
                 std::fstream f(d / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
                 f.write("\xff\xff\xff\xff\xff\xff\x00\x00", 8);
                 return gen(d);
               }, "runs past the end of the file"});
  add(c, {"header length 2 bytes short", [&](const fs::path& d) {
                 std::fstream f(d / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
                 unsigned char len[8];
                 f.read(reinterpret_cast<char*>(len), 8);
                 uint64_t n = 0;
                 for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
                 n -= 2;
                 for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
                 f.seekp(0);
                 f.write(reinterpret_cast<const char*>(len), 8);
                 return gen(d);
               }, "bytes after the last tensor"});
  add(c, {"oversized header (> 100 MB)", [&](const fs::path& d) {
                 const fs::path p = d / "model.safetensors";
                 fs::resize_file(p, 300'000'000);  // sparse
                 std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
                 const uint64_t n = 200'000'000;
                 char len[8];
                 for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
                 f.write(len, 8);
                 return gen(d);
               }, "header length 200000000 exceeds the 100000000-byte limit"});
  add(c, {"deeply nested header JSON", [&](const fs::path& d) {
                 const std::string h = "{\"__metadata__\":" + std::string(100000, '[');
                 std::string len(8, '\0');
                 for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
                 std::ofstream(d / "model.safetensors", std::ios::binary | std::ios::trunc) << len << h;
                 return gen(d);
               }, "JSON nested deeper than 256 levels"});
  add(c, {"duplicate tensor key", [&](const fs::path& d) {
                 std::ofstream(d / "model.safetensors", std::ios::binary | std::ios::trunc)
                     << std::string("\x58\x00\x00\x00\x00\x00\x00\x00", 8)
                     << R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"a":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]}})"
                     << std::string(4, '\0');
                 return gen(d);
               }, "key \"a\" appears twice in one object"});
  add(c, {"wrong dtype", [&](const fs::path& d) {
                 edit_header(d, [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "F16"; });
                 return gen(d);
               }, "model.norm.weight: expected [16] BF16, found [16] F16"});
  add(c, {"wrong shape", [&](const fs::path& d) {
                 edit_header(d, [](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {2, 8}; });
                 return gen(d);
               }, "model.norm.weight: expected [16] BF16, found [2, 8] BF16"});
  add(c, {"missing tensor", [&](const fs::path& d) {
                 edit_header(d, [](nlohmann::json& h) {
                   h["model.norm.weightX"] = h["model.norm.weight"];
                   h.erase("model.norm.weight");
                 });
                 return gen(d);
               }, "missing 1 tensor the config needs: model.norm.weight"});
  add(c, {"extra layer beyond num_hidden_layers", [&](const fs::path& d) {
                 auto cfg = read_json(d / "config.json");
                 cfg["num_hidden_layers"] = 1;
                 write_json(d / "config.json", cfg);
                 return gen(d);
               }, "belongs to layer 1 but config.json has num_hidden_layers=1"});
  add(c, {"sharded checkpoint, shard missing", [&](const fs::path& d) {
                 write_json(d / "model.safetensors.index.json",
                            {{"weight_map", {{"model.norm.weight", "model-00002-of-00002.safetensors"}}}});
                 return gen(d);
               }, "model-00002-of-00002.safetensors (named in"});
  add(c, {"impossible config value", [&](const fs::path& d) {
                 auto cfg = read_json(d / "config.json");
                 cfg["num_key_value_heads"] = 3;
                 write_json(d / "config.json", cfg);
                 return gen(d);
               }, "config.json: num_attention_heads 2 is not a multiple of num_key_value_heads 3"});
  add(c, {"eos_token_id past 32 bits", [&](const fs::path& d) {
                 auto cfg = read_json(d / "config.json");
                 cfg["eos_token_id"] = 4295055298ull;
                 write_json(d / "config.json", cfg);
                 return gen(d);
               }, "config.json: eos_token_id 4295055298 is not a token id"});
  add(c, {"max_position_embeddings too small", [&](const fs::path& d) {
                 auto cfg = read_json(d / "config.json");
                 cfg["max_position_embeddings"] = 1;
                 write_json(d / "config.json", cfg);
                 return gen(d);
               }, "config.json: max_position_embeddings must be >= 2"});
  add(c, {"config.json not JSON", [&](const fs::path& d) {
                 std::ofstream(d / "config.json") << "{\"hidden_size\": 2048,";
                 return gen(d);
               }, "config.json is not valid JSON (line 1, column 22"});
  add(c, {"unsupported tokenizer type", [&](const fs::path& d) {
                 auto t = read_json(d / "tokenizer.json");
                 t["model"]["type"] = "WordPiece";
                 write_json(d / "tokenizer.json", t);
                 return "tokenize --model " + d.string() + " hello";
               }, "tokenizer.json: model type 'WordPiece' is not supported (Lantern supports BPE)"});
  add(c, {"prompt longer than the context", [&](const fs::path& d) {
                 return "generate --device cpu --quiet --max-context 4 --prompt-ids 1,2,3,4,5 --model " +
                        d.string();
               }, "prompt of 5 tokens does not fit the context of 4 tokens (max_context)"});
  add(c, {"--max-new-tokens 0", [&](const fs::path& d) {
                 return "generate --device cpu --quiet --prompt-ids 1 --max-new-tokens 0 --model " + d.string();
               }, "option --max-new-tokens expects an integer in [1, 2147483647], got '0'"});
  add(c, {"--max-new-tokens past 32 bits", [&](const fs::path& d) {
                 return "generate --device cpu --quiet --prompt-ids 1 --max-new-tokens 4294967297 --model " +
                        d.string();
               }, "option --max-new-tokens expects an integer in [1, 2147483647], got '4294967297'"});
  add(c, {"--requests line with a token id past 32 bits", [&](const fs::path& d) {
             std::ofstream(d / "requests.jsonl") << "{\"prompt_ids\": [1, 2, 4294967297]}\n";
             return "generate --device cpu --quiet --model " + d.string() + " --requests " +
                    (d / "requests.jsonl").string();
           }, "requests.jsonl line 1: prompt_ids must hold token ids in [0, 2^31), got 4294967297"});
  add(c, {"--requests line with max_new_tokens past 32 bits", [&](const fs::path& d) {
             std::ofstream(d / "requests.jsonl") << "{\"prompt_ids\": [1], \"max_new_tokens\": 4294967297}\n";
             return "generate --device cpu --quiet --model " + d.string() + " --requests " +
                    (d / "requests.jsonl").string();
           }, "requests.jsonl line 1: max_new_tokens must be an integer in [1, 2147483647], got 4294967297"});
  add(c, {"--repeat 0", [&](const fs::path& d) { return gen(d) + " --repeat 0"; },
               "option --repeat expects an integer in [1, 1000000], got '0'"});
  add(c, {"negative temperature", [&](const fs::path& d) { return gen(d) + " --temperature -1"; },
               "option --temperature expects a number in [0, 1e+06], got '-1'"});
  add(c, {"unknown kernel variant", [&](const fs::path& d) { return gen(d) + " --kernels gemm=99"; },
               "unknown gemm kernel '99': choose one of"});
  add(c, {"limits that cannot fit in memory", [&](const fs::path& d) {
                 return gen(d) + " --max-batch-tokens 2147483647 --max-seqs 16";
               }, "limit max_batch_tokens=2147483647 needs"});
  add(c, {"model path is a file", [&](const fs::path& d) { return gen(d / "config.json"); },
               "is a file, expected a directory holding config.json and model.safetensors"});
  add(c, {"unreadable weights file (a directory)", [&](const fs::path& d) {
                 fs::remove(d / "model.safetensors");
                 fs::create_directory(d / "model.safetensors");
                 return gen(d);
               }, "model.safetensors is not a regular file"});
  add(c, {"deeply nested JSON on stdin", [&](const fs::path& d) {
                 return "detokenize --model " + d.string();
               }, "stdin: JSON nested deeper than 256 levels", std::string(60000, '[')});
  add(c, {"run directory incomplete", [&](const fs::path& d) {
                 auto run = d / "run";
                 run_lantern(kGen + d.string() + " --record " + run.string());
                 fs::remove(run / "kv.json");
                 return "inspect " + run.string();
               }, "kv.json: cannot open"});
  add(c, {"run directory of another format version", [&](const fs::path& d) {
                 auto run = d / "run";
                 run_lantern(kGen + d.string() + " --record " + run.string());
                 auto m = read_json(run / "manifest.json");
                 m["format_version"] = "2.0";
                 write_json(run / "manifest.json", m);
                 return "inspect " + run.string();
               }, "manifest.json: run format 2.0 is newer than this lantern reads (1.x)"});
  const std::string bench = "bench --device cpu --quiet --batch 1 --prompt-len 4 --decode-steps 2 --model ";
  add(c, {"bench --gemm-plans file without plans", [bench](const fs::path& d) {
                 write_json(d / "plans.json", nlohmann::json{{"model", "x"}});
                 return bench + d.string() + " --gemm-plans " + (d / "plans.json").string();
               }, "no gemm_plans array"});
  add(c, {"bench --gemm-plans with a malformed plan", [bench](const fs::path& d) {
                 write_json(d / "plans.json", nlohmann::json{{"gemm_plans", {{{"m_bucket", 16}}}}});
                 return bench + d.string() + " --gemm-plans " + (d / "plans.json").string();
               }, "a malformed plan"});
  add(c, {"bench --gpu-clocks with an unknown mode", [bench](const fs::path& d) {
                 return bench + d.string() + " --gpu-clocks always";
               }, "--gpu-clocks always: expected sample, read or off"});
  add(c, {"run directory with truncated trace.json", [&](const fs::path& d) {
                 auto run = d / "run";
                 run_lantern(kGen + d.string() + " --record " + run.string());
                 fs::resize_file(run / "trace.json", fs::file_size(run / "trace.json") / 2);
                 return "inspect " + run.string();
               }, "trace.json: truncated or not a trace"});
  return c;
}

TEST(ErrorsCli, EveryBadInputExitsOneWithOneLine) {
  const char* table_path = std::getenv("LANTERN_ERRORS_TABLE");
  std::ofstream table;
  if (table_path) table.open(table_path);
  int i = 0;
  for (const Case& c : cases()) {
    const fs::path dir = fresh_model("case" + std::to_string(i++));
    const std::string args = c.setup(dir);
    Outcome o = run_lantern(args, c.stdin_text);
    SCOPED_TRACE(c.name + ": lantern " + args);
    EXPECT_EQ(o.status, 1) << o.output;
    // Exactly one line, the error (a warning line is allowed before it).
    std::string last = o.output;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
    EXPECT_THAT(last, ::testing::MatchesRegex("lantern [a-z]+: error: .*")) << o.output;
    EXPECT_THAT(last, HasSubstr(c.message)) << o.output;
    EXPECT_LT(last.size(), 600u) << "messages are cut, never a 20 KB echo";
    if (table) {
      std::string shown = last;
      for (const std::string& p : {dir.string()}) {
        for (size_t at; (at = shown.find(p)) != std::string::npos;) shown.replace(at, p.size(), "MODEL");
      }
      table << "| " << c.name << " | " << o.status << " | `" << shown << "` |\n";
    }
  }
}

// Not an error case, but the same binary and micro model: `lantern bench`'s
// decode step counts only the steps that decode the whole batch. With
// batch x prompt > --max-batch-tokens the scheduler mixes decode rows of the
// early sequences with later prompts' chunks, and the first sequences finish
// before the last ones prefill when --decode-steps is short: then it warns
// and takes the partial-batch steps (the batch-256 numbers before session 9
// mixed all three kinds of step).
TEST(BenchCli, DecodeStepIsTheMedianOverWholeBatchSteps) {
  const fs::path model = fresh_model("bench");
  const fs::path dir = test::scratch_dir("bench-cli");
  const std::string common = "bench --device cpu --quiet --batch 4 --prompt-len 20 --max-batch-tokens 32 --model " +
                             model.string() + " --json ";
  Outcome whole = run_lantern(common + (dir / "whole.json").string() + " --decode-steps 16");
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_THAT(whole.output, Not(HasSubstr("no step decoded all")));
  const nlohmann::json w = read_json(dir / "whole.json");
  EXPECT_TRUE(w["decode_whole_batch"].get<bool>());
  // 80 prompt tokens at <= 32 rows a step (less the decode rows): >= 3 steps carry prompt rows.
  EXPECT_GE(w["prefill_steps"].get<int>(), 3);
  // Every whole-batch step lies between the last prefill and the first finish (16 tokens each).
  const int n = w["decode_median_over_steps"].get<int>();
  EXPECT_GE(n, 8);
  EXPECT_LE(n, 16);
  EXPECT_EQ(w["decode_steps_ms"].size(), size_t(n));

  Outcome partial = run_lantern(common + (dir / "partial.json").string() + " --decode-steps 2");
  ASSERT_EQ(partial.status, 0) << partial.output;
  EXPECT_THAT(partial.output, HasSubstr("no step decoded all 4 sequences at once"));
  EXPECT_THAT(partial.output, HasSubstr("raise --decode-steps"));
  const nlohmann::json p = read_json(dir / "partial.json");
  EXPECT_FALSE(p["decode_whole_batch"].get<bool>());
  EXPECT_GE(p["decode_median_over_steps"].get<int>(), 1);
}

// `lantern bench --gemm-plans FILE` pins the plans FILE records before the
// engine starts (its gemm.6 plans would otherwise be re-timed per process):
// every entry is read (a valid one counts, on the CPU too, where nothing is
// planned), a run directory's manifest.json is found, and the pinned run's
// numbers are written as usual.
TEST(BenchCli, GemmPlansFileIsReadAndPinned) {
  const fs::path model = fresh_model("bench-plans");
  const fs::path dir = test::scratch_dir("bench-plans-cli");
  const nlohmann::json plan = {{"m_bucket", 512}, {"n", 2048}, {"k", 2048}, {"out", "bf16"}, {"align", 16},
                               {"algo_id", 66}, {"tile", 124}, {"stages", 8}, {"split_k", 1}, {"reduction", 0},
                               {"swizzle", 0}, {"custom", 0}, {"cluster", 0}, {"workspace_limit", 33554432}};
  write_json(dir / "two.json", nlohmann::json{{"gemm_plans", {plan, plan}}});
  const std::string common =
      "bench --device cpu --quiet --batch 1 --prompt-len 4 --decode-steps 2 --model " + model.string();
  Outcome two = run_lantern(common + " --gemm-plans " + (dir / "two.json").string() + " --json " +
                            (dir / "out.json").string());
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("pins 2 GEMM plans from " + (dir / "two.json").string()));
  EXPECT_GT(read_json(dir / "out.json")["decode_step_ms"].get<double>(), 0.0);
  fs::create_directories(dir / "run");
  write_json(dir / "run" / "manifest.json", nlohmann::json{{"config", {{"gemm_plans", {plan}}}}});
  Outcome run = run_lantern(common + " --gemm-plans " + (dir / "run").string());
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("pins 1 GEMM plan from " + (dir / "run" / "manifest.json").string()));
  // generate takes the same option (two recordings with the same GEMM algorithms).
  Outcome gen = run_lantern("generate --device cpu --quiet --ids --prompt-ids 1,2,3 --max-new-tokens 2 --model " +
                            model.string() + " --gemm-plans " + (dir / "run").string());
  ASSERT_EQ(gen.status, 0) << gen.output;
  EXPECT_THAT(gen.output, HasSubstr("pins 1 GEMM plan from " + (dir / "run" / "manifest.json").string()));
  write_json(dir / "none.json", nlohmann::json{{"points", nlohmann::json::array()}});
  Outcome bad = run_lantern("generate --device cpu --quiet --prompt-ids 1,2,3 --model " + model.string() +
                            " --gemm-plans " + (dir / "none.json").string());
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("no gemm_plans array"));
}

}  // namespace
}  // namespace lantern
