// Reads tokenizer.json and tokenizer_config.json into Tokenizer::Impl. Only
// what the Llama 3 family (and plain GPT-2-style byte-level BPE) uses is
// accepted; anything else fails with a message naming the component.
#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace lantern {
namespace {

using json = nlohmann::json;

// HF's ByteLevel pre-tokenizer regex (GPT-2), used when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

json read_json(const std::filesystem::path& path) {
  return parse_json_file(path);
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("(no type)");
}

class Loader {
 public:
  Loader(Tokenizer::Impl& impl, std::string file) : t_(impl), file_(std::move(file)) {}

  [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) const {
    va_list args;
    va_start(args, fmt);
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    LANTERN_FAIL("%s: %s", file_.c_str(), buf);
  }

  void load(const json& j) {
    if (!j.is_object()) fail("expected a JSON object at the top level");
    for (const char* key : {"truncation", "padding"})
      if (j.contains(key) && !j[key].is_null())
        fail("'%s' is set; Lantern does not truncate or pad (remove it or set it to null)", key);
    check_normalizer(j.value("normalizer", json()));
    static const json kNull, kEmpty = json::array();
    // References, not copies: the model holds ~400k strings.
    load_vocab(j.contains("model") ? j["model"] : kNull,
               j.contains("added_tokens") ? j["added_tokens"] : kEmpty);
    bool byte_level = false;
    if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
      fail("pre_tokenizer is null; Lantern supports byte-level BPE (pre_tokenizer ByteLevel)");
    add_pre_tokenizer(j["pre_tokenizer"], byte_level);
    if (!byte_level) fail("pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
    const json decoder = j.value("decoder", json());
    if (type_of(decoder) != "ByteLevel")
      fail("decoder type '%s' is not supported (Lantern supports ByteLevel)",
           type_of(decoder).c_str());
    add_post_processor(j.value("post_processor", json()));
  }

 private:
  void check_normalizer(const json& n) {
    if (n.is_null()) return;
    if (type_of(n) == "Sequence" && n.value("normalizers", json::array()).empty()) return;
    fail("normalizer type '%s' is not supported (the Llama 3 family has none)", type_of(n).c_str());
  }

  void load_vocab(const json& model, const json& added) {
    if (!model.is_object()) fail("'model' is missing");
    const std::string type = model.contains("type") ? type_of(model) : "BPE";
    if (type != "BPE")
      fail("model type '%s' is not supported (Lantern supports BPE)", type.c_str());
    if (model.value("byte_fallback", false)) fail("BPE byte_fallback is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
        fail("BPE %s is not supported", key);
    if (model.contains("dropout") && model["dropout"].is_number() &&
        model["dropout"].get<double>() > 0)
      fail("BPE dropout is not supported (encoding would not be deterministic)");
    if (!model.contains("vocab") || !model["vocab"].is_object())
      fail("model.vocab is missing (expected an object token -> id)");
    if (!added.is_array()) fail("added_tokens must be an array");

    int64_t max_id = -1;
    for (const auto& [text, id] : model["vocab"].items())
      max_id = std::max(max_id, check_id(id, text));
    for (const json& a : added)
      max_id = std::max(max_id, check_id(a.at("id"), a.value("content", "")));
    if (max_id < 0) fail("the vocabulary is empty");
    const size_t n = static_cast<size_t>(max_id) + 1;
    t_.token_text.assign(n, std::string());
    t_.flags.assign(n, 0);
    std::vector<std::string> bytes(n);

    for (const auto& [text, id_json] : model["vocab"].items()) {
      const int32_t id = id_json.get<int32_t>();
      if (t_.flags[id] & kAssigned)
        fail("model.vocab gives id %d to both '%s' and '%s'", id, t_.token_text[id].c_str(),
             text.c_str());
      t_.token_text[id] = text;
      t_.flags[id] = kAssigned;
      t_.token_ids.insert(text, id);
      // A spelling outside the byte alphabet can never be produced by
      // encoding; it still decodes, to its own UTF-8 (as HF does).
      auto raw = byte_level::decode(text);
      if (raw) t_.bpe.add_token(*raw, id);
      bytes[id] = raw ? *raw : text;
    }
    for (const json& a : added) {
      const int32_t id = a.at("id").get<int32_t>();
      const std::string content = a.at("content").get<std::string>();
      if (a.value("single_word", false))
        fail("added token '%s' has single_word=true, which is not supported", content.c_str());
      const bool special = a.value("special", false);
      t_.token_text[id] = content;
      t_.flags[id] = kAssigned | kAdded | (special ? kSpecial : 0) |
                     (a.value("lstrip", false) ? kLstrip : 0) |
                     (a.value("rstrip", false) ? kRstrip : 0);
      t_.token_ids.insert(content, id);
      bytes[id] = content;
      t_.all_added.add(content, id);
      if (!special) t_.plain_added.add(content, id);
    }
    t_.bytes_off.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      t_.bytes_arena += bytes[i];
      t_.bytes_off[i + 1] = static_cast<uint32_t>(t_.bytes_arena.size());
    }
    if (int b = t_.bpe.missing_byte(); b >= 0)
      fail("model.vocab has no token for byte 0x%02X, so it is not a byte-level BPE vocabulary", b);
    static const json kNoMerges = json::array();
    load_merges(model.contains("merges") ? model["merges"] : kNoMerges);
    t_.bpe.set_ignore_merges(model.value("ignore_merges", false));
  }

  int64_t check_id(const json& id, const std::string& text) const {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
      fail("token '%s' has id %s; ids must be integers in [0, 16777216)", text.c_str(),
           id.dump().c_str());
    return id.get<int64_t>();
  }

  void load_merges(const json& merges) {
    if (!merges.is_array()) fail("model.merges must be an array");
    t_.bpe.reserve_merges(merges.size());
    std::string left, right;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      // Two spellings: "left right" (tokenizers < 0.20) or ["left", "right"].
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("merge %zu '%s' is not of the form 'left right'", rank, s.c_str());
        left.assign(s, 0, sp), right.assign(s, sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>(), right = m[1].get<std::string>();
      } else {
        fail("merge %zu is %s; expected \"left right\" or [\"left\", \"right\"]", rank,
             m.dump().c_str());
      }
      const int32_t* a = t_.token_ids.find(left);
      const int32_t* b = t_.token_ids.find(right);
      const int32_t* ab = t_.token_ids.find(left + right);
      if (!a || !b || !ab)
        fail("merge %zu '%s %s' uses a token missing from model.vocab ('%s')", rank, left.c_str(),
             right.c_str(),
             (!a   ? left
              : !b ? right
                   : left + right)
                 .c_str());
      t_.bpe.add_merge(*a, *b, *ab, static_cast<int32_t>(rank));
    }
  }

  void add_pre_tokenizer(const json& pt, bool& byte_level) {
    const std::string type = type_of(pt);
    if (type == "Sequence") {
      for (const json& p : pt.value("pretokenizers", json::array()))
        add_pre_tokenizer(p, byte_level);
    } else if (type == "Split") {
      if (byte_level) fail("a Split pre-tokenizer after ByteLevel is not supported");
      const json pattern = pt.value("pattern", json());
      std::string regex;
      if (pattern.contains("Regex")) {
        regex = pattern["Regex"].get<std::string>();
      } else if (pattern.contains("String")) {
        regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
      } else {
        fail("Split pre-tokenizer pattern %s has neither Regex nor String", pattern.dump().c_str());
      }
      const std::string behavior = pt.value("behavior", "Isolated");
      if (behavior != "Isolated")
        fail("Split pre-tokenizer behavior '%s' is not supported (Lantern supports Isolated)",
             behavior.c_str());
      if (pt.value("invert", false)) fail("Split pre-tokenizer with invert=true is not supported");
      t_.splitters.emplace_back(regex);
    } else if (type == "ByteLevel") {
      if (pt.value("add_prefix_space", false))
        fail("ByteLevel pre-tokenizer with add_prefix_space=true is not supported");
      if (pt.value("use_regex", true)) t_.splitters.emplace_back(kGpt2Pattern);
      byte_level = true;
    } else {
      fail("pre_tokenizer type '%s' is not supported (Lantern supports Sequence, Split, ByteLevel)",
           type.c_str());
    }
  }

  void add_post_processor(const json& pp) {
    const std::string type = pp.is_null() ? "ByteLevel" : type_of(pp);
    if (type == "ByteLevel") return;  // only adjusts offsets: no effect on ids
    if (type == "Sequence") {
      for (const json& p : pp.value("processors", json::array())) add_post_processor(p);
      return;
    }
    if (type != "TemplateProcessing")
      fail(
          "post_processor type '%s' is not supported (Lantern supports ByteLevel, "
          "TemplateProcessing, Sequence)",
          type.c_str());
    bool seen_a = false;
    for (const json& piece : pp.at("single")) {
      if (piece.contains("Sequence")) {
        const std::string id = piece["Sequence"].value("id", "");
        if (id != "A" || seen_a)
          fail("post_processor template uses sequence '%s'; expected one $A", id.c_str());
        seen_a = true;
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece["SpecialToken"].value("id", "");
        const json& entry = pp.at("special_tokens").at(name);
        for (const json& id : entry.at("ids")) {
          const int32_t v = id.get<int32_t>();
          if (v < 0 || v >= static_cast<int32_t>(t_.flags.size()) || !(t_.flags[v] & kAssigned))
            fail("post_processor special token '%s' has id %d, outside the vocabulary",
                 name.c_str(), v);
          (seen_a ? t_.post_suffix : t_.post_prefix).push_back(v);
        }
      } else {
        fail("post_processor template item %s is not understood", piece.dump().c_str());
      }
    }
    if (!seen_a) fail("post_processor template has no $A");
  }

  Tokenizer::Impl& t_;
  std::string file_;
};

std::optional<int32_t> config_token(const json& cfg, const char* key, const Tokenizer::Impl& t,
                                    const std::filesystem::path& path,
                                    std::string* text = nullptr) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  // Either "<|begin_of_text|>" or {"__type": "AddedToken", "content": "<|begin_of_text|>", ...}.
  LANTERN_CHECK(v.is_string() || (v.is_object() && v.contains("content") && v["content"].is_string()),
                "%s: %s must be a token string or {\"content\": \"...\"}, got %s", path.c_str(), key,
                cut_for_message(v.dump()).c_str());
  const std::string s = v.is_string() ? v.get<std::string>() : v["content"].get<std::string>();
  const int32_t* id = t.token_ids.find(s);
  LANTERN_CHECK(id, "%s: %s '%s' is not in the vocabulary of tokenizer.json", path.c_str(), key,
                cut_for_message(s).c_str());
  if (text) *text = s;
  return *id;
}

void load_config(const std::filesystem::path& path, Tokenizer::Impl& t) {
  const json cfg = read_json(path);
  LANTERN_CHECK(cfg.is_object(), "%s: expected a JSON object at the top level", path.c_str());
  try {
    t.bos = config_token(cfg, "bos_token", t, path, &t.bos_token);
    t.eos = config_token(cfg, "eos_token", t, path);
    if (cfg.contains("chat_template")) {
      const json& ct = cfg["chat_template"];
      std::string jinja;
      if (ct.is_string()) jinja = ct.get<std::string>();
      for (const json& named : ct.is_array() ? ct : json::array())  // [{name, template}, ...]
        if (named.value("name", "") == "default") jinja = named.value("template", "");
      t.chat = detect_chat_template(jinja);
    }
  } catch (const json::exception& e) {
    LANTERN_FAIL("%s: malformed tokenizer_config.json: %s", path.c_str(), json_error_reason(e).c_str());
  }
}

}  // namespace

void load_tokenizer_files(const std::filesystem::path& json_path,
                          const std::filesystem::path& config_path, Tokenizer::Impl& t) {
  t.source = json_path.string();
  const json j = read_json(json_path);
  try {
    Loader(t, t.source).load(j);
  } catch (const json::exception& e) {
    LANTERN_FAIL("%s: malformed tokenizer.json: %s", json_path.c_str(), json_error_reason(e).c_str());
  }
  if (!config_path.empty() && std::filesystem::exists(config_path)) load_config(config_path, t);
  if (t.eos) t.stop.push_back(*t.eos);
  for (const char* name : {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"}) {
    const int32_t* id = t.token_ids.find(name);
    if (id && (t.flags[*id] & kAdded) &&
        std::find(t.stop.begin(), t.stop.end(), *id) == t.stop.end())
      t.stop.push_back(*id);
  }
}

}  // namespace lantern
