// Lantern's tokenizer against the independent JS reference (@lenml/tokenizers,
// see tests/tokenizer/reference.mjs): the fixed corpus in tests/tokenizer/,
// fresh random text, random id sequences and chat renderings must all give
// identical ids / text. The reference runs once per tokenizer directory for
// the whole suite (node loads the 9 MB tokenizer.json in about a second).
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer_test_util.h"

namespace lantern {
namespace {

using json = nlohmann::json;
using namespace tokenizer_test;

// One reference request and what it checks.
struct Case {
  std::string label;
  json request;
};

struct RefRun {
  bool done = false;
  std::string error;
  std::vector<Case> cases;
  std::vector<json> answers;
};

// Inputs are drawn once per process (from the test seed); each reference run
// happens on first use, so a test process runs only the node calls it needs.
struct SuiteState {
  std::vector<std::pair<std::string, std::string>> corpus;  // name, text
  std::vector<std::string> random_texts, random_bytes;
  std::vector<std::vector<int32_t>> random_ids;
  std::vector<std::vector<ChatMessage>> chats;
  std::map<std::string, RefRun> runs;  // by tokenizer directory name
};
SuiteState* g = nullptr;

json chat_request(const std::vector<ChatMessage>& msgs, bool gen, const std::string* date) {
  json m = json::array();
  for (const auto& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
  json r = {{"op", "chat"}, {"messages", m}, {"add_generation_prompt", gen}};
  if (date) r["date"] = *date;
  return r;
}

void add_chat_cases(RefRun& run, bool llama31) {
  for (size_t i = 0; i < g->chats.size(); ++i) {
    const auto& msgs = g->chats[i];
    if (llama31 && msgs.empty()) continue;  // HF's 3.1 template fails on no messages
    const std::string date = strformat("%02zu Mar 2025", 1 + i % 9);
    run.cases.push_back({"chat " + std::to_string(i) + " gen", chat_request(msgs, true, nullptr)});
    run.cases.push_back(
        {"chat " + std::to_string(i) + " nogen", chat_request(msgs, false, nullptr)});
    if (llama31)
      run.cases.push_back({"chat " + std::to_string(i) + " date", chat_request(msgs, true, &date)});
  }
}

void draw_inputs() {
  auto& rng = test::rng();
  g->corpus = load_corpus();
  for (int i = 0; i < 300; ++i) g->random_texts.push_back(random_corpus_mix(g->corpus, rng));
  for (int i = 0; i < 300; ++i) g->random_texts.push_back(random_unicode(rng));
  for (int i = 0; i < 100; ++i) g->random_bytes.push_back(random_bytes(rng));
  g->chats = fixed_chats();
  for (int i = 0; i < 60; ++i) g->chats.push_back(random_chat(g->corpus, rng));
  for (int i = 0; i < 300; ++i) g->random_ids.push_back(random_ids(llama3(), g->random_texts, rng));
}

void build_cases(const std::string& name, RefRun& r) {
  if (name != "npm") {
    // Llama 3.1 / 3.2 Instruct directories: the npm vocab with the real 3.1
    // post_processor (BOS template) and the published chat templates.
    for (size_t i = 0; i < 40; ++i)
      r.cases.push_back(
          {"add_special " + std::to_string(i),
           {{"op", "encode"}, {"hex", to_hex(g->random_texts[i])}, {"add_special", true}}});
    add_chat_cases(r, true);
    return;
  }
  for (const auto& [cname, text] : g->corpus) {
    r.cases.push_back({"corpus " + cname, {{"op", "encode"}, {"hex", to_hex(text)}}});
    r.cases.push_back({"corpus(no special) " + cname,
                       {{"op", "encode"}, {"hex", to_hex(text)}, {"special", false}}});
  }
  for (size_t i = 0; i < g->random_texts.size(); ++i)
    r.cases.push_back({"random text " + std::to_string(i) + " " + printable(g->random_texts[i]),
                       {{"op", "encode"}, {"hex", to_hex(g->random_texts[i])}}});
  for (size_t i = 0; i < g->random_bytes.size(); ++i)
    r.cases.push_back({"random bytes " + std::to_string(i) + " " + to_hex(g->random_bytes[i]),
                       {{"op", "encode"}, {"hex", to_hex(g->random_bytes[i])}}});
  for (size_t i = 0; i < g->random_ids.size(); ++i) {
    r.cases.push_back(
        {"decode-all " + std::to_string(i), {{"op", "decode"}, {"ids", g->random_ids[i]}}});
    r.cases.push_back({"decode-skip " + std::to_string(i),
                       {{"op", "decode"}, {"ids", g->random_ids[i]}, {"skip_special", true}}});
  }
  add_chat_cases(r, false);
}

// The reference's answers for tokenizer directory `name` ("npm", "llama31", "llama32").
const RefRun& reference_run(const std::string& name) {
  RefRun& r = g->runs[name];
  if (r.done) return r;
  r.done = true;
  try {
    if (!reference_available(&r.error)) return r;
    build_cases(name, r);
    std::vector<json> reqs;
    for (const Case& c : r.cases) reqs.push_back(c.request);
    run_reference(tokenizer_dir(name), reqs, r.answers, &r.error);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

class TokenizerReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (g) return;
    g = new SuiteState;
    try {
      draw_inputs();
    } catch (const std::exception& e) {
      input_error_ = e.what();
    }
  }
  void SetUp() override { ASSERT_TRUE(input_error_.empty()) << input_error_; }
  static inline std::string input_error_;

  // The reference run for `name`; fails the test when it could not run.
  static const RefRun& run(const std::string& name) { return reference_run(name); }

  // Checks every case of `run` whose label starts with `prefix` with `check`.
  template <typename F>
  void for_cases(const RefRun& run, std::string_view prefix, F&& check) {
    ASSERT_TRUE(run.error.empty()) << run.error;
    int checked = 0, failures = 0;
    for (size_t i = 0; i < run.cases.size(); ++i) {
      if (run.cases[i].label.rfind(prefix, 0) != 0) continue;
      ++checked;
      const json& a = run.answers[i];
      if (a.contains("error")) {
        ADD_FAILURE() << run.cases[i].label << ": reference failed: " << a["error"];
        ++failures;
      } else if (!check(run.cases[i], a)) {
        ++failures;
      }
      if (failures >= 10) FAIL() << "stopping after 10 failures";
    }
    EXPECT_GT(checked, 0) << "no cases labelled " << prefix;
  }
};

TEST_F(TokenizerReference, CorpusEncodesLikeJs) {
  const Tokenizer& tok = llama3();
  size_t i = 0;
  for_cases(run("npm"), "corpus ", [&](const Case& c, const json& a) {
    const std::string& text = g->corpus[i++].second;
    auto ids = tok.encode(text);
    bool ok = expect_ids(c.label, text, ids, a["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(ids), text) << c.label << ": decode(encode(x)) != x";
    return ok && tok.decode(ids) == text;
  });
  i = 0;
  for_cases(run("npm"), "corpus(no special) ", [&](const Case& c, const json& a) {
    const std::string& text = g->corpus[i++].second;
    auto ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids), text) << c.label;
    return expect_ids(c.label, text, ids, a["ids"].get<std::vector<int32_t>>());
  });
}

TEST_F(TokenizerReference, RandomTextEncodesLikeJs) {
  const Tokenizer& tok = llama3();
  size_t i = 0;
  for_cases(run("npm"), "random text ", [&](const Case& c, const json& a) {
    const std::string& text = g->random_texts[i++];
    auto ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text) << c.label << ": decode(encode(x)) != x";
    return expect_ids(c.label, text, ids, a["ids"].get<std::vector<int32_t>>());
  });
}

TEST_F(TokenizerReference, InvalidUtf8EncodesLikeJsTextDecoder) {
  const Tokenizer& tok = llama3();
  size_t i = 0;
  for_cases(run("npm"), "random bytes ", [&](const Case& c, const json& a) {
    const std::string& bytes = g->random_bytes[i++];
    return expect_ids(c.label, bytes, tok.encode(bytes), a["ids"].get<std::vector<int32_t>>());
  });
}

TEST_F(TokenizerReference, DecodeAndStreamLikeJs) {
  const Tokenizer& tok = llama3();
  size_t i = 0, j = 0;
  for_cases(run("npm"), "decode-all ", [&](const Case& c, const json& a) {
    const auto& ids = g->random_ids[i++];
    const std::string expected = from_hex(a["hex"].get<std::string>());
    std::string streamed;
    StreamDecoder stream(tok);
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, expected) << c.label << ": streamed text differs from decode";
    EXPECT_EQ(tok.decode(ids), expected) << c.label << " ids " << json(ids).dump();
    return tok.decode(ids) == expected;
  });
  for_cases(run("npm"), "decode-skip ", [&](const Case& c, const json& a) {
    const auto& ids = g->random_ids[j++];
    const std::string expected = from_hex(a["hex"].get<std::string>());
    EXPECT_EQ(tok.decode(ids, true), expected) << c.label << " ids " << json(ids).dump();
    return tok.decode(ids, true) == expected;
  });
}

// Renders and encodes every chat case of `run` with `tok` and compares.
void check_chats(const Tokenizer& tok, const RefRun& run) {
  ASSERT_TRUE(run.error.empty()) << run.error;
  for (size_t i = 0; i < run.cases.size(); ++i) {
    const Case& c = run.cases[i];
    if (c.label.rfind("chat ", 0) != 0) continue;
    const json& a = run.answers[i];
    ASSERT_FALSE(a.contains("error")) << c.label << ": reference failed: " << a["error"];
    std::vector<ChatMessage> msgs;
    for (const json& m : c.request["messages"]) msgs.push_back({m["role"], m["content"]});
    ChatOptions opts;
    opts.add_generation_prompt = c.request["add_generation_prompt"].get<bool>();
    if (c.request.contains("date")) opts.date = c.request["date"];
    const std::string expected = from_hex(a["hex"].get<std::string>());
    const std::string got = tok.render_chat(msgs, opts);
    ASSERT_EQ(printable(got), printable(expected)) << c.label << " " << c.request.dump();
    ASSERT_EQ(tok.encode_chat(msgs, opts), a["ids"].get<std::vector<int32_t>>()) << c.label;
  }
}

TEST_F(TokenizerReference, Llama3ChatFormatLikeJs) {
  ASSERT_TRUE(llama3().chat_template().has_value());
  EXPECT_EQ(llama3().chat_template()->form, ChatForm::llama3);
  check_chats(llama3(), reference_run("npm"));
}

TEST_F(TokenizerReference, Llama31ChatFormatLikeJs) {
  for (const char* name : {"llama31", "llama32"}) {
    const Tokenizer& tok = cached_tokenizer(name);
    ASSERT_TRUE(tok.chat_template().has_value()) << name;
    EXPECT_EQ(tok.chat_template()->form, ChatForm::llama31) << name;
    check_chats(tok, reference_run(name));
  }
}

TEST_F(TokenizerReference, PostProcessorAddsBosLikeJs) {
  const Tokenizer& tok = cached_tokenizer("llama31");
  size_t i = 0;
  for_cases(run("llama31"), "add_special ", [&](const Case& c, const json& a) {
    const std::string& text = g->random_texts[i++];
    auto ids = tok.post_process(tok.encode(text));
    EXPECT_EQ(ids.front(), 128000) << c.label;
    return expect_ids(c.label, text, ids, a["ids"].get<std::vector<int32_t>>());
  });
}

}  // namespace
}  // namespace lantern
