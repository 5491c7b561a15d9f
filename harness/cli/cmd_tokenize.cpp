// `lantern tokenize` and `lantern detokenize`: text <-> token ids with the
// model's tokenizer, identical to Hugging Face's (see docs/tokenizer.md).
//
//   lantern tokenize --model DIR [--no-special] TEXT      -> [9906,11,...]
//   lantern tokenize --model DIR [--no-special] --file PATH
//   lantern tokenize --model DIR [--no-special] --jsonl FILE|-   (one {"text": ...} per line)
//   lantern detokenize --model DIR [--skip-special] < ids.json   (prints the text as is)
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "engine/tokenizer/tokenizer.h"
#include "harness/cli/command.h"

namespace lantern::cli {
namespace {

std::string read_all(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string read_path(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LANTERN_CHECK(in, "cannot read %s", path.c_str());
  return read_all(in);
}

// Appends "[1,2,3]\n" (hand-rolled: batch output can be millions of ids).
void append_ids(const std::vector<int32_t>& ids, std::string& out) {
  out += '[';
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    auto res = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, res.ptr);
  }
  out += "]\n";
}

void write_stdout(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
}

int run_jsonl(const Tokenizer& tok, const std::string& path, bool allow_special) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    LANTERN_CHECK(file, "cannot read %s", path.c_str());
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line, out;
  std::vector<int32_t> ids;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;  // blank lines carry nothing
    nlohmann::json obj = parse_json_text(line, strformat("%s line %zu", path.c_str(), lineno));
    LANTERN_CHECK(obj.is_object() && obj.contains("text") && obj["text"].is_string(),
                  "%s line %zu: expected an object with a string \"text\", like {\"text\": \"hi\"}",
                  path.c_str(), lineno);
    ids.clear();
    tok.encode_into(obj["text"].get_ref<const std::string&>(), ids, allow_special);
    append_ids(ids, out);
    if (out.size() > (1 << 20)) write_stdout(out), out.clear();
  }
  write_stdout(out);
  return 0;
}

int cmd_tokenize(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--file", "--jsonl"}, {"--no-special"});
  const Tokenizer tok = Tokenizer::load(args.require("--model"));
  const bool allow_special = !args.flag("--no-special");
  const int sources =
      !args.positional().empty() + args.get("--file").has_value() + args.get("--jsonl").has_value();
  LANTERN_CHECK(sources == 1 && args.positional().size() <= 1,
                "give exactly one input: TEXT (quoted), --file PATH or --jsonl FILE");
  if (auto jsonl = args.get("--jsonl")) return run_jsonl(tok, *jsonl, allow_special);
  const std::string text =
      args.get("--file") ? read_path(*args.get("--file")) : args.positional()[0];
  std::string out;
  append_ids(tok.encode(text, allow_special), out);
  write_stdout(out);
  return 0;
}

int cmd_detokenize(const std::vector<std::string>& argv) {
  Args args(argv, {"--model"}, {"--skip-special"});
  LANTERN_CHECK(
      args.positional().empty(),
      "detokenize reads the ids from stdin, e.g. echo '[9906]' | lantern detokenize --model DIR");
  const Tokenizer tok = Tokenizer::load(args.require("--model"));
  nlohmann::json ids = parse_json_text(read_all(std::cin), "stdin");
  LANTERN_CHECK(ids.is_array(), "stdin must hold one JSON array of token ids, e.g. [9906, 11]");
  std::vector<int32_t> v;
  for (const auto& id : ids) {
    LANTERN_CHECK(
        id.is_number_integer() && id.get<int64_t>() >= INT32_MIN && id.get<int64_t>() <= INT32_MAX,
        "token ids must be integers in [%d, %d]; got %s", INT32_MIN, INT32_MAX,
        cut_for_message(id.dump()).c_str());
    v.push_back(id.get<int32_t>());
  }
  write_stdout(tok.decode(v, args.flag("--skip-special")));
  return 0;
}

}  // namespace

LANTERN_COMMAND("tokenize", "text -> token ids (JSON) with the model's tokenizer", cmd_tokenize);
LANTERN_COMMAND("detokenize", "token ids (JSON array on stdin) -> text", cmd_detokenize);

}  // namespace lantern::cli
