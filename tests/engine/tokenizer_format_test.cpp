// The tokenizer.json loader (merge order, ignore_merges, added-token options,
// post-processor templates, clear errors on bad or unsupported files), BPE
// against a naive implementation, and the chat formats.
#include <algorithm>
#include <unordered_map>

#include "kernels/base/errors.h"
#include "engine/tokenizer/byte_level.h"
#include "tests/engine/tokenizer_test_util.h"

namespace lantern {
namespace {

using namespace tokenizer_test;
using Ids = std::vector<int32_t>;

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A small byte-level BPE tokenizer.json: ids 0..255 are the bytes, then `extra` tokens.
json tiny_json(const std::vector<std::string>& extra,
               const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b)
    vocab[byte_level::encode(std::string(1, static_cast<char>(b)))] = id++;
  for (const auto& t : extra) vocab[byte_level::encode(t)] = id++;
  json m = json::array();
  for (const auto& [l, r] : merges)
    m.push_back(byte_level::encode(l) + " " + byte_level::encode(r));
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", kLlama3Regex}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", false}}}};
}

Tokenizer load_json(const json& j, const json* config = nullptr) {
  static int n = 0;
  const fs::path dir = private_scratch("tokenizer-tiny-" + std::to_string(n++));
  write_file(dir / "tokenizer.json", j.dump());
  if (config) write_file(dir / "tokenizer_config.json", config->dump());
  return Tokenizer::load(config ? dir : dir / "tokenizer.json");
}

// The message of the Error that loading `j` throws ("" when it loads).
std::string load_error(const json& j, const json* config = nullptr) {
  try {
    load_json(j, config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerBpe, LowestRankFirstLeftmostOnTies) {
  const int a = 'a', b = 'b', c = 'c';
  Tokenizer t1 = load_json(tiny_json({"bc", "ab"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(t1.encode("abc"), (Ids{a, 256}));  // "b c" has rank 0
  Tokenizer t2 = load_json(tiny_json({"bc", "ab"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(t2.encode("abc"), (Ids{257, c}));
  (void)b;
  // "a a" then "aa aa": n letters give n/4 "aaaa", then "aa" and "a" for the rest;
  // lengths above 24 bytes take the heap path, shorter ones the flat scan.
  Tokenizer t3 = load_json(tiny_json({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  for (int n = 1; n <= 100; ++n) {
    Ids want(n / 4, 257);
    if (n % 4 >= 2) want.push_back(256);
    if (n % 2) want.push_back(a);
    EXPECT_EQ(t3.encode(std::string(n, 'a')), want) << n << " letters";
  }
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeVocabEntries) {
  json j = tiny_json({"bc", "abc"}, {{"b", "c"}});
  EXPECT_EQ(load_json(j).encode("abc"), (Ids{'a', 256}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load_json(j).encode("abc"), (Ids{257}));
}

TEST(TokenizerBpe, MatchesNaiveMergingOnLlama3) {
  const Tokenizer& tok = llama3();
  const json tj = json::parse(read_file(npm_dir() / "llama3" / "tokenizer.json"));
  std::unordered_map<std::string, int> rank;
  for (size_t i = 0; i < tj["model"]["merges"].size(); ++i)
    rank[tj["model"]["merges"][i]] = static_cast<int>(i);
  // Textbook BPE on strings: merge the lowest-ranked adjacent pair, leftmost first.
  auto naive = [&](const std::string& piece) {
    const std::string whole = byte_level::encode(piece);
    if (auto id = tok.token_to_id(whole); id && !tok.is_special(*id))
      return Ids{*id};  // ignore_merges
    std::vector<std::string> sym;
    for (char ch : piece) sym.push_back(byte_level::encode(std::string(1, ch)));
    for (;;) {
      int best = -1, best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = rank.find(sym[i] + " " + sym[i + 1]);
        if (it != rank.end() && it->second < best_rank)
          best = static_cast<int>(i), best_rank = it->second;
      }
      if (best < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + best + 1);
    }
    Ids ids;
    for (const auto& s : sym) ids.push_back(*tok.token_to_id(s));
    return ids;
  };
  auto& rng = test::rng();
  const auto corpus = load_corpus();
  for (int i = 0; i < 400; ++i) {
    std::string text = i % 3 == 0 ? random_unicode(rng) : random_corpus_mix(corpus, rng);
    if (i % 10 == 0) text += std::string(30 + pick(rng, 150), "xyzq"[i % 4]) + "ing";  // heap path
    Ids want;
    for (const auto& piece : tok.pre_tokenize(text, false)) {
      Ids p = naive(piece);
      want.insert(want.end(), p.begin(), p.end());
    }
    ASSERT_TRUE(expect_ids("naive BPE", text, tok.encode(text, false), want));
  }
}

TEST(TokenizerLoad, AddedTokenOptionsAndTemplates) {
  json j = tiny_json({}, {});
  j["added_tokens"] = json::parse(R"([
    {"id": 256, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false},
    {"id": 257, "content": "<x>", "special": false, "lstrip": true, "rstrip": true, "single_word": false, "normalized": false},
    {"id": 258, "content": "</s>", "special": true}])");
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [256], "tokens": ["<s>"]},
                       "</s>": {"id": "</s>", "ids": [258], "tokens": ["</s>"]}}})");
  const json config = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                       {"eos_token", "</s>"}};
  Tokenizer tok = load_json(j, &config);
  EXPECT_EQ(tok.encode("a \u3000<x>\n b"),
            (Ids{'a', 257, 'b'}));  // <x> eats White_Space both sides
  EXPECT_EQ(tok.encode("<s>a", true), (Ids{256, 'a'}));
  EXPECT_EQ(tok.encode("<s><x>", false), (Ids{'<', 's', '>', 257}));  // non-special still matched
  EXPECT_EQ(tok.post_process(Ids{'a'}), (Ids{256, 'a', 258}));
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 258);
  EXPECT_EQ(tok.decode(Ids{256, 'h', 'i', 258}, true), "hi");
  EXPECT_FALSE(tok.chat_template().has_value());
}

TEST(TokenizerLoad, ErrorsNameTheProblem) {
  auto expect_error = [](const json& j, const std::string& needle) {
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  };
  json j = tiny_json({"ab"}, {{"a", "b"}});
  ASSERT_EQ(load_error(j), "");
  json bad = j;
  bad["model"]["type"] = "Unigram";
  expect_error(bad, "model type 'Unigram' is not supported");
  bad = j, bad["normalizer"] = {{"type", "NFC"}};
  expect_error(bad, "normalizer type 'NFC' is not supported");
  bad = j, bad["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(bad, "pre_tokenizer type 'Metaspace' is not supported");
  bad = j, bad["decoder"] = {{"type", "WordPiece"}};
  expect_error(bad, "decoder type 'WordPiece' is not supported");
  bad = j, bad["post_processor"] = {{"type", "BertProcessing"}};
  expect_error(bad, "post_processor type 'BertProcessing' is not supported");
  bad = j, bad["model"]["merges"].push_back("a zz");
  expect_error(bad, "uses a token missing from model.vocab");
  bad = j, bad["model"]["merges"].push_back("abc");
  expect_error(bad, "is not of the form 'left right'");
  bad = j, bad["model"]["vocab"].erase(byte_level::encode("\n"));
  expect_error(bad, "no token for byte 0x0A");
  bad = j, bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_error(bad, "does not compile");
  bad = j, bad["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(bad, "behavior 'Removed' is not supported");
  bad = j, bad["model"]["byte_fallback"] = true;
  expect_error(bad, "byte_fallback is not supported");
  bad = j, bad["model"]["vocab"]["zzz"] = "seven";
  expect_error(bad, "ids must be integers");
  bad = j, bad["truncation"] = {{"max_length", 8}};
  expect_error(bad, "'truncation' is set");
  bad = j, bad.erase("model");
  expect_error(bad, "'model' is missing");
  const json config = {{"bos_token", "<nope>"}};
  EXPECT_NE(load_error(j, &config).find("bos_token '<nope>' is not in the vocabulary"),
            std::string::npos);

  const fs::path dir = private_scratch("tokenizer-bad");
  write_file(dir / "tokenizer.json", "{\"model\": ");
  try {
    Tokenizer::load(dir);
    FAIL() << "truncated JSON loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::load(dir / "missing.json"), Error);
  fs::remove(dir / "tokenizer.json");
  try {
    Tokenizer::load(dir);
    FAIL() << "a directory without tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerChat, DetectsTheFormFromTheTemplate) {
  const auto npm = json::parse(read_file(npm_dir() / "llama3" / "tokenizer_config.json"));
  auto info = detect_chat_template(npm["chat_template"].get<std::string>());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->form, ChatForm::llama3);
  EXPECT_TRUE(info->always_adds_generation_prompt);
  for (const char* name : {"llama31_instruct.jinja", "llama32_instruct.jinja"}) {
    info =
        detect_chat_template(read_file(test::test_data_dir() / "tokenizer" / "templates" / name));
    ASSERT_TRUE(info.has_value()) << name;
    EXPECT_EQ(info->form, ChatForm::llama31) << name;
    EXPECT_FALSE(info->always_adds_generation_prompt) << name;
  }
  EXPECT_FALSE(
      detect_chat_template("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"));
  EXPECT_EQ(parse_chat_form("llama31"), ChatForm::llama31);
  EXPECT_FALSE(parse_chat_form("chatml"));
}

TEST(TokenizerChat, RendersBothForms) {
  const std::vector<ChatMessage> msgs = {{"system", " Be brief. "}, {"user", "\nHi!\t"}};
  ChatTemplateInfo l31{ChatForm::llama31, false};
  EXPECT_EQ(
      render_chat(l31, "<|begin_of_text|>", msgs, {}),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user"
      "<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatOptions opts;
  opts.add_generation_prompt = false;
  opts.date = "01 Jan 2025";
  EXPECT_EQ(
      render_chat(l31, "<|begin_of_text|>", std::vector<ChatMessage>{{"user", "x"}}, opts),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
      "\n\nx<|eot_id|>");
  EXPECT_THROW(render_chat(l31, "<|begin_of_text|>", {}, {}), Error);
  ChatTemplateInfo l3{ChatForm::llama3, false};
  EXPECT_EQ(
      render_chat(l3, "<B>", msgs, opts),
      "<B><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
      "<|end_header_id|>\n\nHi!<|eot_id|>");
  // Tool results: ipython header, JSON-encoded, not trimmed.
  EXPECT_EQ(render_chat(l31, "", std::vector<ChatMessage>{{"tool", " 42\n"}}, opts),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 01 Jan 2025\n\n<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"
            "\" 42\\n\"<|eot_id|>");
}

TEST(TokenizerChat, TokenizerUsesItsTemplateOrTheGivenForm) {
  const Tokenizer& tok = llama3();
  ChatOptions no_gen;
  no_gen.add_generation_prompt = false;
  // The npm template never reads add_generation_prompt: the header is always there.
  const std::string s = tok.render_chat(std::vector<ChatMessage>{{"user", "hi"}}, no_gen);
  EXPECT_TRUE(s.ends_with("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")) << s;
  const auto ids = tok.encode_chat(std::vector<ChatMessage>{{"user", "hi"}});
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128006), 2);  // <|start_header_id|>

  Tokenizer bare = load_json(tiny_json({}, {}));
  try {
    bare.render_chat(std::vector<ChatMessage>{{"user", "hi"}});
    FAIL() << "rendered without a template or a form";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no Llama 3 family chat_template"), std::string::npos)
        << e.what();
  }
  ChatOptions forced;
  forced.form = ChatForm::llama3;
  EXPECT_EQ(bare.render_chat(std::vector<ChatMessage>{{"user", "hi"}}, forced),
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|"
            "end_header_id|>\n\n");
}

TEST(TokenizerChat, TrimAndJsonFollowPython) {
  EXPECT_EQ(python_strip("\x1c\x1f \u0085\u3000hi\u00a0\u2029\n"), "hi");
  EXPECT_EQ(python_strip("\ufeffhi\u200b"), "\ufeffhi\u200b");  // not whitespace to Python
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01é\x7f"), "\"a\\\"b\\\\c\\n\\t\\u0001é\x7f\"");
}

}  // namespace
}  // namespace lantern
