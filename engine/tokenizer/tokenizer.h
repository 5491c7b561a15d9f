#pragma once
// Hugging Face tokenizer.json tokenizers (byte-level BPE: the Llama 3 family)
// in C++: text in, ids out, identical to HF `tokenizer.encode(text,
// add_special_tokens=False)`; ids in, text out; and the chat format.
//
//   auto tok = lantern::Tokenizer::load(model_dir);   // or .../tokenizer.json
//   std::vector<int32_t> ids = tok.encode("Hello, world");
//   std::string text = tok.decode(ids);                // == "Hello, world"
//   lantern::StreamDecoder stream(tok);                // token-by-token output
//   for (int32_t id : generated) std::fputs(stream.push(id).c_str(), stdout);
//   std::fputs(stream.flush().c_str(), stdout);
//
// Text that is not valid UTF-8 is repaired first: every maximal ill-formed
// subpart becomes U+FFFD (what Python's errors="replace" and JS's TextDecoder
// do), so decode(encode(x)) == x for valid UTF-8 and == the repaired x
// otherwise. decode() repairs the same way when ids end mid-character.
// Details and the reasons: docs/tokenizer.md.
//
// A Tokenizer is immutable after load(); every const method may be called
// from many threads at once (the piece cache and regex scratch are per thread).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat.h"

namespace lantern {

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json (+ DIR/tokenizer_config.json when present), or a
  // tokenizer.json path (+ the tokenizer_config.json beside it). Throws a
  // one-line lantern::Error naming the file and the problem — including any
  // tokenizer type or component Lantern does not support.
  static Tokenizer load(const std::filesystem::path& model_dir_or_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // HF encode(text, add_special_tokens=False). With allow_special, added-token
  // strings in the text (e.g. "<|eot_id|>") become their ids, as HF does; with
  // !allow_special, special tokens are plain text (HF split_special_tokens=True).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Same, appending to `out` (batch callers reuse one vector).
  void encode_into(std::string_view text, std::vector<int32_t>& out,
                   bool allow_special = true) const;
  // What HF's add_special_tokens=True adds around encoded ids: the
  // post_processor's template (Llama 3.1: <|begin_of_text|> first; the npm
  // Llama 3 file: nothing).
  std::vector<int32_t> post_process(std::span<const int32_t> ids) const;
  // The pre-tokenized pieces encode() runs BPE on (added tokens are pieces too).
  std::vector<std::string> pre_tokenize(std::string_view text, bool allow_special = true) const;

  // UTF-8 text of `ids` (no clean_up_tokenization_spaces: decode must invert
  // encode). Throws on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes one token stands for (an added token: its content).
  std::string_view token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // largest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;  // tokenizer.json spelling
  const std::string& id_to_token(int32_t id) const;                  // tokenizer.json spelling
  bool is_special(int32_t id) const;

  // From tokenizer_config.json (nullopt when absent).
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::string& bos_token() const;  // "" when absent
  // Ids that end a generation: eos plus the family's end-of-turn tokens found
  // in the vocabulary (<|end_of_text|>, <|eot_id|>, <|eom_id|>).
  const std::vector<int32_t>& stop_ids() const;
  bool is_stop(int32_t id) const;

  // The chat_template, when it is a Llama 3 family one (see chat.h).
  const std::optional<ChatTemplateInfo>& chat_template() const;
  // Renders messages with the model's chat format (opts.form overrides the
  // detected one); throws when there is neither.
  std::string render_chat(std::span<const ChatMessage> messages,
                          const ChatOptions& opts = {}) const;
  // encode(render_chat(...)), special tokens parsed.
  std::vector<int32_t> encode_chat(std::span<const ChatMessage> messages,
                                   const ChatOptions& opts = {}) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  void check_id(int32_t id) const;
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text without ever splitting a character: push()
// returns only complete UTF-8 and holds back a partial one until the bytes
// that finish it arrive. push()s followed by flush() concatenate to exactly
// decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();  // the held-back bytes (an unfinished character becomes U+FFFD)
  bool has_pending() const { return !pending_.empty(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace lantern
