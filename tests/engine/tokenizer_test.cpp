// Unit tests of the tokenizer's parts: UTF-8 repair, the byte alphabet, BPE
// merge order, the Llama 3 split rules where the JS port and HF differ,
// decoding and streaming, thread safety. The JS comparison lives in
// tokenizer_reference_test.cpp; chat and loader errors in tokenizer_format_test.cpp.
#include <thread>

#include "kernels/base/errors.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/engine/tokenizer_test_util.h"

namespace lantern {
namespace {

using namespace tokenizer_test;
using Pieces = std::vector<std::string>;

TEST(TokenizerUtf8, RepairsMaximalSubparts) {
  auto repair = [](std::string_view s) {
    std::string out;
    utf8::append_repaired(s, out);
    return out;
  };
  const std::string R = "\xEF\xBF\xBD";
  // The example of Unicode §3.9 (Table 3-8): one U+FFFD per maximal subpart.
  EXPECT_EQ(repair("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(repair("\xED\xA0\x80"), R + R + R);          // a surrogate is not a scalar value
  EXPECT_EQ(repair("\xC0\xAF"), R + R);                  // overlong
  EXPECT_EQ(repair("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(repair("ok \xF0\x9F\x98"), "ok " + R);       // truncated at the end: one
  EXPECT_EQ(repair("é中😀"), "é中😀");
  EXPECT_TRUE(utf8::next("\xF0\x9F\x98").truncated);
  EXPECT_FALSE(utf8::next("\xF0\x41").truncated);
  EXPECT_EQ(utf8::valid_prefix("abcdefghij\xFFxyz"), 10u);
}

TEST(TokenizerByteLevel, AlphabetMatchesGpt2) {
  EXPECT_EQ(byte_level::char_of_byte(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_level::char_of_byte('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_level::char_of_byte(0xAD), 0x143u);  // soft hyphen, the last remapped byte
  EXPECT_EQ(byte_level::char_of_byte('A'), static_cast<uint32_t>('A'));
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level::decode(byte_level::encode(all)), all);
  EXPECT_FALSE(byte_level::decode("\xE4\xB8\xAD").has_value());  // 中 is not in the alphabet
}

// Where HF (Oniguruma) and the JS port's regex disagree, Lantern follows HF.
TEST(TokenizerPreTokenize, FollowsHuggingFaceRegexSemantics) {
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.pre_tokenize("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(tok.pre_tokenize("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(tok.pre_tokenize("  x"), (Pieces{" ", " x"}));
  EXPECT_EQ(tok.pre_tokenize("a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(tok.pre_tokenize("I'm"), (Pieces{"I", "'m"}));
  EXPECT_EQ(tok.pre_tokenize("IT'S"), (Pieces{"IT", "'S"}));
  // U+0085 is White_Space in Oniguruma (JS's \s misses it).
  EXPECT_EQ(tok.pre_tokenize("x\u0085!"), (Pieces{"x", "\u0085", "!"}));
  // U+FEFF is not (JS's \s has it), so it joins the punctuation run.
  EXPECT_EQ(tok.pre_tokenize("x\ufeff!"), (Pieces{"x", "\ufeff!"}));
  // U+180E is not White_Space since Unicode 6.3 (PCRE2's own \s still has it).
  EXPECT_EQ(tok.pre_tokenize("x\u180e!"), (Pieces{"x", "\u180e!"}));
  // (?i:'s) matches the long s, as case folding says (the JS port's rewrite does not).
  EXPECT_EQ(tok.pre_tokenize("it'\u017fx"), (Pieces{"it", "'\u017f", "x"}));
  EXPECT_EQ(tok.pre_tokenize("a<|eot_id|>b"), (Pieces{"a", "<|eot_id|>", "b"}));
  EXPECT_EQ(tok.pre_tokenize("a<|eot_id|>b", false), (Pieces{"a", "<|", "eot", "_id", "|>", "b"}));
}

TEST(TokenizerPreTokenize, ExpandsClassEscapes) {
  const std::string e = tok::expand_class_escapes("\\s+(?!\\S)|[^\\s\\p{L}]|\\\\s|\\w");
  EXPECT_EQ(e.find("\\s"), e.find("\\\\s") + 1) << e;  // only the escaped backslash survives
  EXPECT_NE(e.find("[^\\t"), std::string::npos) << e;
  EXPECT_NE(e.find("\\p{M}"), std::string::npos) << e;
  EXPECT_THROW(tok::expand_class_escapes("[\\S]"), Error);
}

TEST(TokenizerEncode, KnownIdsAndSpecials) {
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.encode("Hello, my dog is cute"),
            (std::vector<int32_t>{9906, 11, 856, 5679, 374, 19369}));
  EXPECT_EQ(tok.encode("<|eot_id|>"), std::vector<int32_t>{128009});
  const auto plain = tok.encode("<|eot_id|>", false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok.decode(plain), "<|eot_id|>");
  EXPECT_EQ(tok.id_to_token(9906), "Hello");
  EXPECT_EQ(tok.token_to_id("Ġworld"), 1917);
  EXPECT_EQ(tok.token_bytes(1917), " world");
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.eos_id(), 128001);
  // eos, plus <|eot_id|>; this Llama 3 (not 3.1) file has no <|eom_id|>: 128008 is reserved.
  EXPECT_TRUE(tok.is_stop(128001) && tok.is_stop(128009));
  EXPECT_FALSE(tok.is_stop(128008) || tok.is_stop(9906));
  EXPECT_TRUE(tok.is_special(128009));
  EXPECT_FALSE(tok.is_special(9906));
  // The npm Llama 3 file's post_processor is ByteLevel only: nothing is added.
  EXPECT_EQ(tok.post_process(std::vector<int32_t>{1, 2}), (std::vector<int32_t>{1, 2}));
}

TEST(TokenizerEncode, InvalidUtf8BecomesReplacementCharacters) {
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.encode("a\xFF"
                       "b"),
            tok.encode("a\uFFFDb"));
  EXPECT_EQ(tok.decode(tok.encode("x\xE4\xB8")), "x\uFFFD");
  EXPECT_EQ(tok.encode("\xC0\xAF"), tok.encode("\uFFFD\uFFFD"));
}

TEST(TokenizerEncode, LongPiecesRoundTrip) {
  const Tokenizer& tok = llama3();
  std::string cjk, latin;
  for (int i = 0; i < 5000; ++i) utf8::append_code_point(0x4E00 + (i * 131) % 20000, cjk);
  for (int i = 0; i < 20000; ++i) latin += "abcdefghijklmnopqrstuvwxyz"[(i * i + 7 * i) % 26];
  for (const std::string& s : {cjk, latin, std::string(100000, ' '), std::string(30000, '9')}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
}

TEST(TokenizerEncode, ThreadsAgreeWithOneThread) {
  const Tokenizer& tok = llama3();
  const auto corpus = load_corpus();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& [name, text] : corpus) expected.push_back(tok.encode(text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < corpus.size(); ++i)
          mismatches[t] += tok.encode(corpus[(i + t) % corpus.size()].second) !=
                           expected[(i + t) % corpus.size()];
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(TokenizerDecode, RejectsIdsOutOfRange) {
  const Tokenizer& tok = llama3();
  for (int32_t bad : {-1, 128256, 1 << 30}) {
    try {
      tok.decode(std::vector<int32_t>{9906, bad});
      FAIL() << "decode accepted id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
    StreamDecoder stream(tok);
    EXPECT_THROW(stream.push(bad), Error);
  }
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{9906, 128009}, true), "Hello");
}

TEST(TokenizerStream, NeverEmitsHalfACharacter) {
  const Tokenizer& tok = llama3();
  auto byte_id = [&](uint8_t b) {
    return *tok.token_to_id(byte_level::encode(std::string(1, static_cast<char>(b))));
  };
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(byte_id(0xF0)), "");
  EXPECT_EQ(stream.push(byte_id(0x9F)), "");
  EXPECT_EQ(stream.push(byte_id(0x98)), "");
  EXPECT_TRUE(stream.has_pending());
  EXPECT_EQ(stream.push(byte_id(0x80)), "😀");
  EXPECT_EQ(stream.push(byte_id(0xE4)), "");
  EXPECT_EQ(stream.push(9906), "\uFFFDHello");  // a broken character becomes U+FFFD, once
  EXPECT_EQ(stream.push(byte_id(0xE4)), "");
  EXPECT_EQ(stream.flush(), "\uFFFD");
  EXPECT_FALSE(stream.has_pending());

  // Token by token over real text: every chunk is whole characters.
  auto& rng = test::rng();
  const auto corpus = load_corpus();
  for (int i = 0; i < 200; ++i) {
    const std::string text = i % 2 ? random_unicode(rng) : random_corpus_mix(corpus, rng);
    StreamDecoder s(tok);
    std::string joined;
    for (int32_t id : tok.encode(text)) {
      std::string chunk = s.push(id);
      ASSERT_EQ(utf8::valid_prefix(chunk), chunk.size());
      if (text.find("\uFFFD") == std::string::npos) {
        ASSERT_EQ(chunk.find("\uFFFD"), std::string::npos) << printable(text);
      }
      joined += chunk;
    }
    joined += s.flush();
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace lantern
