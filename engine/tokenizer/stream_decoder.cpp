#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace lantern {

std::string StreamDecoder::push(int32_t id) {
  std::string_view bytes = tok_->token_bytes(id);  // throws on a bad id
  if (skip_special_ && tok_->is_special(id)) bytes = {};
  pending_.append(bytes);
  // Hold back the tail only if it is the start of a character that later
  // bytes may complete. Such a start is a non-continuation byte within the
  // last three bytes; everything before it decodes the same whatever follows.
  size_t emit = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const size_t pos = pending_.size() - back;
    if ((static_cast<uint8_t>(pending_[pos]) & 0xC0) == 0x80) continue;
    if (utf8::next(std::string_view(pending_).substr(pos)).truncated) emit = pos;
    break;
  }
  std::string out;
  utf8::append_repaired(std::string_view(pending_).substr(0, emit), out);
  pending_.erase(0, emit);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_repaired(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace lantern
