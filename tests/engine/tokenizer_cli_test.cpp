// `lantern tokenize` / `lantern detokenize` end to end: the built binary
// against the library on the same inputs, and its errors.
#include <sys/wait.h>

#include "tests/engine/tokenizer_test_util.h"

namespace lantern {
namespace {

using namespace tokenizer_test;

struct CliResult {
  int status;
  std::string out;
};

fs::path lantern_binary() {
  return fs::path(LANTERN_BINARY_DIR) / "bin" / "lantern";
}

// Runs `lantern ARGS` through the shell; stdout and stderr together unless split.
CliResult lantern(const std::string& args, bool with_stderr = true) {
  const std::string cmd =
      sh_quote(lantern_binary()) + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(cmd.c_str(), "r");
  CliResult r{-1, ""};
  char buf[4096];
  size_t n;
  while (pipe && (n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  if (pipe) r.status = WEXITSTATUS(pclose(pipe));
  return r;
}

std::string ids_line(const std::vector<int32_t>& ids) {
  return json(ids).dump() + "\n";
}

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(lantern_binary()))
        << lantern_binary() << " is missing: build the `lantern` target before running this test";
    ASSERT_TRUE(fs::exists(npm_dir() / "llama3" / "tokenizer.json")) << "run scripts/setup.sh";
    dir_ = private_scratch("tokenizer-cli");
    model_ = std::string("--model ") + sh_quote(npm_dir() / "llama3");
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(TokenizerCli, TokenizeMatchesTheLibrary) {
  const Tokenizer& tok = llama3();
  CliResult r = lantern("tokenize " + model_ + " 'Hello, world <|eot_id|>'", false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, ids_line(tok.encode("Hello, world <|eot_id|>")));
  r = lantern("tokenize " + model_ + " --no-special '<|eot_id|>'", false);
  EXPECT_EQ(r.out, ids_line(tok.encode("<|eot_id|>", false)));

  const std::string bytes = "caf\xC3\xA9 \xFF\xFE broken\n\t中文 😀";  // invalid UTF-8 inside
  write_file(dir_ / "in.txt", bytes);
  r = lantern("tokenize " + model_ + " --file " + sh_quote(dir_ / "in.txt"), false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, ids_line(tok.encode(bytes)));
}

TEST_F(TokenizerCli, JsonlBatchGivesOneLinePerRecord) {
  const Tokenizer& tok = llama3();
  const std::vector<std::string> texts = {"first line", "", "tabs\tand\nnewlines <|eot_id|>",
                                          "中文 😀"};
  std::string in, want;
  for (const auto& t : texts) {
    in += json({{"text", t}}).dump() + "\n\n";  // blank lines between records are skipped
    want += ids_line(tok.encode(t));
  }
  write_file(dir_ / "batch.jsonl", in);
  CliResult r = lantern("tokenize " + model_ + " --jsonl " + sh_quote(dir_ / "batch.jsonl"), false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, want);
  r = lantern("tokenize " + model_ + " --jsonl - < " + sh_quote(dir_ / "batch.jsonl"), false);
  EXPECT_EQ(r.out, want);

  write_file(dir_ / "bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": 1}\n");
  r = lantern("tokenize " + model_ + " --jsonl " + sh_quote(dir_ / "bad.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;
}

TEST_F(TokenizerCli, DetokenizeRoundTripsAndRejectsBadIds) {
  const Tokenizer& tok = llama3();
  const std::string text = "  Hello,\r\n world! 中文 😀 <|eot_id|>\n";
  write_file(dir_ / "ids.json", json(tok.encode(text)).dump());
  CliResult r = lantern("detokenize " + model_ + " < " + sh_quote(dir_ / "ids.json"), false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, text);
  r = lantern("detokenize --skip-special " + model_ + " < " + sh_quote(dir_ / "ids.json"), false);
  EXPECT_EQ(r.out, text.substr(0, text.find("<|eot_id|>")) + "\n");

  write_file(dir_ / "bad.json", "[9906, 128256]");
  r = lantern("detokenize " + model_ + " < " + sh_quote(dir_ / "bad.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("out of range"), std::string::npos) << r.out;
  write_file(dir_ / "bad.json", "{\"ids\": [1]}");
  r = lantern("detokenize " + model_ + " < " + sh_quote(dir_ / "bad.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("JSON array of token ids"), std::string::npos) << r.out;
}

TEST_F(TokenizerCli, ClearErrors) {
  CliResult r = lantern(std::string("tokenize --model ") + sh_quote(dir_) + "hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("has no tokenizer.json"), std::string::npos) << r.out;
  r = lantern("tokenize " + model_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("give exactly one input"), std::string::npos) << r.out;
  r = lantern("tokenize " + model_ + " one two");
  EXPECT_EQ(r.status, 1);
}

}  // namespace
}  // namespace lantern
