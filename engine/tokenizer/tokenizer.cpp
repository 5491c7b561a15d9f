#include "engine/tokenizer/tokenizer.h"

#include <atomic>

#include "kernels/base/errors.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/utf8.h"

namespace lantern {
namespace {

// Pieces this long or shorter are cached: frequent words repeat, long runs rarely do.
constexpr size_t kMaxCachedPiece = 64;
// Bound on cached pieces per thread; the cache is emptied when it fills
// (simpler than LRU, and a refill costs one BPE per distinct piece).
constexpr size_t kMaxCacheEntries = 1 << 15;

struct IdSpan {
  uint32_t off = 0, len = 0;
};

// Per-thread memo of piece -> ids, tied to one tokenizer instance at a time.
struct PieceCache {
  uint64_t owner = 0;
  tok::FlatStringMap<IdSpan> map{2 * kMaxCacheEntries};
  std::vector<int32_t> ids;
  void reset(uint64_t new_owner) {
    owner = new_owner;
    map.reset(2 * kMaxCacheEntries);
    ids.clear();
  }
};

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path json_path = path, config_path;
  if (fs::is_directory(path)) {
    json_path = path / "tokenizer.json";
    LANTERN_CHECK(fs::exists(json_path),
                  "%s has no tokenizer.json: point --model at a Hugging Face model directory "
                  "(or at a tokenizer.json file)",
                  path.c_str());
  } else {
    LANTERN_CHECK(fs::exists(path), "tokenizer file %s does not exist", path.c_str());
  }
  config_path = json_path.parent_path() / "tokenizer_config.json";
  auto impl = std::make_unique<Impl>();
  impl->instance_id = g_next_instance.fetch_add(1);
  load_tokenizer_files(json_path, config_path, *impl);
  return Tokenizer(std::move(impl));
}

// Splits `text` at added tokens; calls on_text(section) for the text between
// them and on_token(id, content) for each added token found.
template <typename OnText, typename OnToken>
static void for_each_section(const Tokenizer::Impl& t, std::string_view text, bool allow_special,
                             OnText&& on_text, OnToken&& on_token) {
  const tok::AddedTokenMatcher& m = allow_special ? t.all_added : t.plain_added;
  size_t pos = 0;
  while (pos < text.size()) {
    auto hit = m.empty() ? tok::AddedTokenMatcher::Match{} : m.find(text, pos);
    std::string_view before = text.substr(pos, (hit.found() ? hit.pos : text.size()) - pos);
    if (hit.found() && (t.flags[hit.id] & kLstrip))
      before = utf8::trim_right(before, utf8::is_white_space);
    if (!before.empty()) on_text(before);
    if (!hit.found()) break;
    on_token(hit.id, text.substr(hit.pos, hit.len));
    pos = hit.pos + hit.len;
    if (t.flags[hit.id] & kRstrip)
      pos = text.size() - utf8::trim_left(text.substr(pos), utf8::is_white_space).size();
  }
}

// Pre-tokenizes one section (no added tokens inside) into `pieces`.
static void split_section(const Tokenizer::Impl& t, std::string_view section,
                          std::vector<std::string_view>& pieces) {
  const size_t first = pieces.size();
  if (t.splitters.empty()) {
    pieces.push_back(section);
    return;
  }
  t.splitters[0].split(section, pieces);
  thread_local std::vector<std::string_view> refined;
  for (size_t s = 1; s < t.splitters.size(); ++s) {
    refined.clear();
    for (size_t i = first; i < pieces.size(); ++i) t.splitters[s].split(pieces[i], refined);
    pieces.resize(first);
    pieces.insert(pieces.end(), refined.begin(), refined.end());
  }
}

void Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out,
                            bool allow_special) const {
  const Impl& t = *impl_;
  std::string repaired;
  if (utf8::valid_prefix(text) != text.size()) {
    utf8::append_repaired(text, repaired);
    text = repaired;
  }
  thread_local PieceCache cache;
  if (cache.owner != t.instance_id) cache.reset(t.instance_id);
  thread_local std::vector<std::string_view> pieces;

  auto encode_piece = [&](std::string_view piece) {
    if (piece.size() == 1 || piece.size() > kMaxCachedPiece) return t.bpe.encode_piece(piece, out);
    const uint64_t h = tok::hash_bytes(piece);
    if (const IdSpan* hit = cache.map.find_hashed(piece, h)) {
      out.insert(out.end(), cache.ids.begin() + hit->off, cache.ids.begin() + hit->off + hit->len);
      return;
    }
    const size_t before = out.size();
    t.bpe.encode_piece(piece, out);
    if (cache.map.size() >= kMaxCacheEntries) cache.reset(t.instance_id);
    cache.map.insert_hashed(piece, h,
                            IdSpan{static_cast<uint32_t>(cache.ids.size()),
                                   static_cast<uint32_t>(out.size() - before)});
    cache.ids.insert(cache.ids.end(), out.begin() + before, out.end());
  };
  for_each_section(
      t, text, allow_special,
      [&](std::string_view section) {
        pieces.clear();
        split_section(t, section, pieces);
        for (std::string_view piece : pieces) encode_piece(piece);
      },
      [&](int32_t id, std::string_view) { out.push_back(id); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, allow_special);
  return out;
}

std::vector<int32_t> Tokenizer::post_process(std::span<const int32_t> ids) const {
  std::vector<int32_t> out(impl_->post_prefix);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), impl_->post_suffix.begin(), impl_->post_suffix.end());
  return out;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text, bool allow_special) const {
  std::string repaired;
  utf8::append_repaired(text, repaired);
  std::vector<std::string> out;
  std::vector<std::string_view> pieces;
  for_each_section(
      *impl_, repaired, allow_special,
      [&](std::string_view section) {
        pieces.clear();
        split_section(*impl_, section, pieces);
        out.insert(out.end(), pieces.begin(), pieces.end());
      },
      [&](int32_t, std::string_view content) { out.emplace_back(content); });
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  LANTERN_CHECK(id >= 0 && id < vocab_size(),
                "token id %d is out of range: this tokenizer has ids 0..%d", id, vocab_size() - 1);
  LANTERN_CHECK(impl_->flags[id] & kAssigned, "token id %d is not assigned in %s", id,
                impl_->source.c_str());
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && (impl_->flags[id] & kSpecial)) continue;
    bytes.append(impl_->bytes_of(id));
  }
  if (utf8::valid_prefix(bytes) == bytes.size()) return bytes;
  std::string repaired;
  utf8::append_repaired(bytes, repaired);
  return repaired;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return impl_->bytes_of(id);
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->flags.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const int32_t* id = impl_->token_ids.find(token);
  return id ? std::optional<int32_t>(*id) : std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return impl_->token_text[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (impl_->flags[id] & kSpecial);
}

std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}
const std::string& Tokenizer::bos_token() const {
  return impl_->bos_token;
}
const std::vector<int32_t>& Tokenizer::stop_ids() const {
  return impl_->stop;
}
bool Tokenizer::is_stop(int32_t id) const {
  for (int32_t s : impl_->stop)
    if (s == id) return true;
  return false;
}

const std::optional<ChatTemplateInfo>& Tokenizer::chat_template() const {
  return impl_->chat;
}

std::string Tokenizer::render_chat(std::span<const ChatMessage> messages,
                                   const ChatOptions& opts) const {
  ChatTemplateInfo info;
  if (opts.form) {
    info.form = *opts.form;
    info.always_adds_generation_prompt =
        impl_->chat && impl_->chat->form == info.form && impl_->chat->always_adds_generation_prompt;
  } else {
    LANTERN_CHECK(impl_->chat,
                  "%s: tokenizer_config.json has no Llama 3 family chat_template; choose the chat "
                  "form explicitly (llama3 or llama31)",
                  impl_->source.c_str());
    info = *impl_->chat;
  }
  // Message text follows the same invalid-UTF-8 rule as encode().
  std::vector<ChatMessage> clean(messages.begin(), messages.end());
  for (ChatMessage& m : clean) {
    if (utf8::valid_prefix(m.content) == m.content.size()) continue;
    std::string repaired;
    utf8::append_repaired(m.content, repaired);
    m.content = std::move(repaired);
  }
  return lantern::render_chat(info, impl_->bos_token, clean, opts);
}

std::vector<int32_t> Tokenizer::encode_chat(std::span<const ChatMessage> messages,
                                            const ChatOptions& opts) const {
  return encode(render_chat(messages, opts), true);
}

}  // namespace lantern
