#include "engine/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "kernels/base/errors.h"
#include "engine/synth.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// A model small enough to write in microseconds: 2 layers, GQA 2/1.
ModelConfig micro_config(bool tied = true) {
  test::MicroShape s;
  s.tied = tied;
  return test::micro_config(s);
}

// A safetensors file with the given tensors (zero data), via the writer's layout.
void write_model_file(const fs::path& p, const std::vector<TensorSpec>& specs) {
  SafetensorsLayout l = safetensors_layout(specs);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << l.prefix << std::string(l.data_bytes, '\0');
}

// A file with a literal header, `data_bytes` of data, and optionally a lying length.
void write_raw(const fs::path& p, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> declared_length = std::nullopt) {
  uint64_t n = declared_length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      << out << header << std::string(data_bytes, '\0');
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string header_error(const fs::path& p) {
  return error_of([&] { read_safetensors_header(p); });
}

std::string match_error(const fs::path& dir, const ModelConfig& cfg) {
  return error_of([&] { match_tensor_table(open_safetensors_model(dir), expected_tensors(cfg)); });
}

TEST(Safetensors, DtypeSizes) {
  EXPECT_EQ(safetensors_dtype_bytes("BF16"), 2u);
  EXPECT_EQ(safetensors_dtype_bytes("F32"), 4u);
  EXPECT_EQ(safetensors_dtype_bytes("I64"), 8u);
  EXPECT_EQ(safetensors_dtype_bytes("F8_E4M3"), 1u);
  EXPECT_THAT(error_of([] { safetensors_dtype_bytes("Q4_0"); }),
              HasSubstr("unknown safetensors dtype \"Q4_0\""));
}

TEST(Safetensors, LayoutAndHeaderRoundTrip) {
  auto dir = test::scratch_dir("st_roundtrip");
  std::vector<TensorSpec> specs = expected_tensors(micro_config());
  SafetensorsLayout layout = safetensors_layout(specs);
  EXPECT_EQ((layout.prefix.size()) % 8, 0u);  // data area 8-byte aligned, as HF writes it
  write_model_file(dir / "model.safetensors", specs);

  SafetensorsFile f = read_safetensors_header(dir / "model.safetensors");
  EXPECT_EQ(f.file_bytes, layout.file_bytes());
  EXPECT_EQ(f.data_start, layout.prefix.size());
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.tensors.size(), specs.size());
  for (size_t i = 1; i < f.tensors.size(); ++i) EXPECT_EQ(f.tensors[i].begin, f.tensors[i - 1].end);
  for (size_t i = 0; i < specs.size(); ++i) {
    auto it = std::find_if(f.tensors.begin(), f.tensors.end(),
                           [&](const SafetensorsEntry& e) { return e.name == specs[i].name; });
    ASSERT_NE(it, f.tensors.end()) << specs[i].name;
    EXPECT_EQ(it->shape, specs[i].shape);
    EXPECT_EQ(it->dtype, "BF16");
    EXPECT_EQ(it->begin, f.data_start + layout.offsets[i]);
    EXPECT_EQ(it->bytes(), specs[i].bytes());
  }
  SafetensorsModel m = open_safetensors_model(dir);
  EXPECT_TRUE(m.index.empty());
  EXPECT_EQ(m.tensor_count(), specs.size());
  std::vector<std::string> extra;
  auto entries = match_tensor_table(m, specs, &extra);
  EXPECT_TRUE(extra.empty());
  ASSERT_EQ(entries.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(entries[i].name, specs[i].name);
}

TEST(Safetensors, RejectsTruncatedFiles) {
  auto dir = test::scratch_dir("st_truncated");
  fs::path p = dir / "model.safetensors";
  write_model_file(p, expected_tensors(micro_config()));
  fs::resize_file(p, fs::file_size(p) - 10);
  EXPECT_THAT(header_error(p), HasSubstr("run past the end of the data area"));
  EXPECT_THAT(header_error(p), HasSubstr("file truncated?"));
  EXPECT_THAT(header_error(p), HasSubstr(p.string()));
  fs::resize_file(p, 5);
  EXPECT_THAT(header_error(p), HasSubstr("file is 5 bytes, too short for a safetensors header"));
  fs::resize_file(p, 0);
  EXPECT_THAT(header_error(p), HasSubstr("file is 0 bytes"));
}

TEST(Safetensors, RejectsHeaderLengthPastEndOfFile) {
  auto dir = test::scratch_dir("st_hlen");
  fs::path p = dir / "x.safetensors";
  const std::string h = R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  write_raw(p, h, 4, /*declared_length=*/1000000);
  EXPECT_THAT(header_error(p), HasSubstr("header length 1000000 runs past the end of the file"));
  write_raw(p, h, 4, /*declared_length=*/UINT64_MAX - 2);  // must not wrap around
  EXPECT_THAT(header_error(p), HasSubstr("runs past the end of the file"));
  write_raw(p, "", 0, 0);
  EXPECT_THAT(header_error(p), HasSubstr("header does not start with '{'"));
}

TEST(Safetensors, RejectsMalformedHeaderJson) {
  auto dir = test::scratch_dir("st_json");
  fs::path p = dir / "x.safetensors";
  write_raw(p, R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]})", 4);  // missing '}'
  EXPECT_THAT(header_error(p), HasSubstr("header is not valid JSON"));
  write_raw(p, R"([1, 2])", 0);
  EXPECT_THAT(header_error(p), HasSubstr("header does not start with '{'"));
}

TEST(Safetensors, RejectsBadEntries) {
  auto dir = test::scratch_dir("st_entries");
  fs::path p = dir / "x.safetensors";
  struct Case {
    const char* header;
    size_t data;
    const char* message;
  };
  const Case cases[] = {
      {R"({"a": 5})", 0, "a: entry must be an object, got 5"},
      {R"({"a":{"shape":[2],"data_offsets":[0,4]}})", 4, "a: entry has no dtype"},
      {R"({"a":{"dtype":"BF16","data_offsets":[0,4]}})", 4, "a: entry has no shape"},
      {R"({"a":{"dtype":"BF16","shape":[2]}})", 4, "a: entry has no data_offsets"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,4]}})", 4,
       "a: unknown safetensors dtype \"Q4\""},
      {R"({"a":{"dtype":"BF16","shape":[-1,2],"data_offsets":[0,4]}})", 4,
       "a: shape dimension must be a non-negative integer, got -1"},
      {R"({"a":{"dtype":"BF16","shape":"2","data_offsets":[0,4]}})", 4, "a: shape must be a list"},
      {R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[4]}})", 4,
       "a: data_offsets must be [begin, end], got [4]"},
      {R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,0]}})", 4,
       "a: data_offsets [4, 0] end before they begin"},
      {R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}})", 8,
       "a: data_offsets [0, 6] span 6 bytes but [2, 2] BF16 needs 8"},
      {R"({"a":{"dtype":"BF16","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4,
       "is too large"},
      {R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4],"x":1}})", 4,
       "a: unexpected field \"x\""},
      {R"({"__metadata__":{"format":1}})", 0, "__metadata__.format must be a string"},
      // Offsets outside the data area and overlapping tensors.
      {R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})", 4,
       "a: data_offsets [0, 8] run past the end of the data area (4 bytes)"},
      {R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},
           "b":{"dtype":"BF16","shape":[4],"data_offsets":[4,12]}})",
       12, "tensors a [0, 8) and b [4, 12) overlap"},
      {R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},
           "b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       8, "overlap"},
  };
  for (const auto& c : cases) {
    write_raw(p, c.header, c.data);
    EXPECT_THAT(header_error(p), HasSubstr(c.message)) << c.header;
    EXPECT_THAT(header_error(p), HasSubstr(p.string() + ": ")) << c.header;
  }
  // Empty tensors are fine where they do not split the tiling.
  write_raw(p, R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},
                   "e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
            4);
  SafetensorsFile f = read_safetensors_header(p);
  ASSERT_EQ(f.tensors.size(), 2u);
}

// Hostile-input probe (issue 15): the tensors must tile the data area exactly.
TEST(Safetensors, RejectsGapsTrailingBytesAndShortHeaderLength) {
  auto dir = test::scratch_dir("st_cover");
  fs::path p = dir / "x.safetensors";
  write_raw(p, R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})", 12);
  EXPECT_THAT(header_error(p),
              HasSubstr("tensor a starts at data offset 8 but the previous tensor ends at 0"));
  write_raw(p, R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 7);
  EXPECT_THAT(header_error(p), HasSubstr(": 3 bytes after the last tensor"));
  // The probe's case: the declared length stops 1 or 2 bytes early, inside the
  // padding spaces, so the JSON still parses and every tensor would be read
  // shifted by that much.
  const std::string h = R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}  )";
  for (uint64_t shorter : {1, 2}) {
    write_raw(p, h, 4, h.size() - shorter);
    EXPECT_THAT(header_error(p), HasSubstr(std::to_string(shorter) + " bytes after the last tensor"))
        << shorter;
  }
  write_raw(p, h, 4);
  EXPECT_EQ(read_safetensors_header(p).tensors.at(0).begin, 8 + h.size());
}

TEST(Safetensors, RejectsDuplicateKeysAndDeepMetadata) {
  auto dir = test::scratch_dir("st_dup");
  fs::path p = dir / "x.safetensors";
  write_raw(p, R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},
                   "a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
            8);
  EXPECT_THAT(header_error(p), HasSubstr("key \"a\" appears twice in one object"));
  // 100,000 levels in __metadata__ crashed the parser (SIGSEGV) before.
  std::string deep = R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  write_raw(p, deep, 0);
  EXPECT_THAT(header_error(p), HasSubstr("JSON nested deeper than 256 levels"));
}

TEST(Safetensors, MatchReportsWrongShapeAndDtype) {
  auto dir = test::scratch_dir("st_match");
  const ModelConfig cfg = micro_config();
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  for (auto& s : specs)
    if (s.name == "model.layers.1.mlp.up_proj.weight") s.shape = {32, 8};
  write_model_file(dir / "model.safetensors", specs);
  EXPECT_THAT(match_error(dir, cfg),
              HasSubstr("model.safetensors: model.layers.1.mlp.up_proj.weight: expected [32, 16] "
                        "BF16, found [32, 8] BF16"));

  specs = expected_tensors(cfg);
  for (auto& s : specs)
    if (s.name == "model.norm.weight") s.dtype = "F32";
  write_model_file(dir / "model.safetensors", specs);
  EXPECT_THAT(match_error(dir, cfg),
              HasSubstr("model.norm.weight: expected [16] BF16, found [16] F32"));

  specs = expected_tensors(cfg);
  for (auto& s : specs)
    if (s.name == "model.embed_tokens.weight") s.shape = {16, 64};  // transposed
  write_model_file(dir / "model.safetensors", specs);
  EXPECT_THAT(match_error(dir, cfg),
              HasSubstr("model.embed_tokens.weight: expected [64, 16] BF16, found [16, 64] BF16"));
}

TEST(Safetensors, MatchReportsMissingAndExtraTensors) {
  auto dir = test::scratch_dir("st_missing");
  const ModelConfig cfg = micro_config();
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  std::erase_if(specs, [](const TensorSpec& s) {
    return s.name == "model.layers.1.self_attn.k_proj.weight";
  });
  write_model_file(dir / "model.safetensors", specs);
  EXPECT_THAT(
      match_error(dir, cfg),
      HasSubstr("missing 1 tensor the config needs: model.layers.1.self_attn.k_proj.weight"));

  specs = expected_tensors(cfg);
  std::erase_if(specs, [](const TensorSpec& s) { return s.layer == 1; });
  write_model_file(dir / "model.safetensors", specs);
  EXPECT_THAT(match_error(dir, cfg), HasSubstr("missing 9 tensors the config needs: "
                                               "model.layers.1.input_layernorm.weight, "));
  EXPECT_THAT(match_error(dir, cfg), HasSubstr("(4 more)"));

  // An untied config needs lm_head.weight.
  write_model_file(dir / "model.safetensors", expected_tensors(cfg));
  EXPECT_THAT(match_error(dir, micro_config(/*tied=*/false)),
              HasSubstr("missing 1 tensor the config needs: lm_head.weight"));

  // Extra tensors are listed, not fatal.
  specs = expected_tensors(cfg);
  specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {4}, "F32"});
  specs.push_back({"lm_head.weight", {64, 16}, "BF16"});  // present although tied
  write_model_file(dir / "model.safetensors", specs);
  std::vector<std::string> extra;
  auto entries = match_tensor_table(open_safetensors_model(dir), expected_tensors(cfg), &extra);
  EXPECT_EQ(entries.size(), expected_tensors(cfg).size());
  EXPECT_EQ(extra, (std::vector<std::string>{"lm_head.weight",
                                             "model.layers.0.self_attn.rotary_emb.inv_freq"}));
}

TEST(Safetensors, ModelPathErrors) {
  auto dir = test::scratch_dir("st_paths");
  auto open_error = [](const fs::path& p) { return error_of([&] { open_safetensors_model(p); }); };
  EXPECT_THAT(open_error(dir / "missing"),
              HasSubstr("model directory " + (dir / "missing").string() + " does not exist"));
  std::ofstream(dir / "file") << "x";
  EXPECT_THAT(open_error(dir / "file"), HasSubstr("is a file, expected a directory"));
  EXPECT_THAT(open_error(dir),
              HasSubstr("holds neither model.safetensors nor model.safetensors.index.json"));
  fs::create_directory(dir / "model.safetensors");
  EXPECT_THAT(open_error(dir), HasSubstr("model.safetensors is not a regular file"));
}

// Two shards plus an index, as HF writes large checkpoints.
struct Sharded {
  fs::path dir;
  ModelConfig cfg = micro_config();
  std::vector<TensorSpec> first, second;
  json index;
  explicit Sharded(const std::string& name) : dir(test::scratch_dir(name)) {
    for (const auto& s : expected_tensors(cfg)) (s.layer == 1 ? second : first).push_back(s);
    write_model_file(dir / "model-00001-of-00002.safetensors", first);
    write_model_file(dir / "model-00002-of-00002.safetensors", second);
    index["metadata"] = {{"total_size", 0}};
    for (const auto& s : first) index["weight_map"][s.name] = "model-00001-of-00002.safetensors";
    for (const auto& s : second) index["weight_map"][s.name] = "model-00002-of-00002.safetensors";
    write_index();
  }
  void write_index() const { std::ofstream(dir / "model.safetensors.index.json") << index.dump(); }
};

TEST(Safetensors, ShardedIndex) {
  Sharded s("st_sharded");
  SafetensorsModel m = open_safetensors_model(s.dir);
  EXPECT_EQ(m.index, s.dir / "model.safetensors.index.json");
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.tensor_count(), expected_tensors(s.cfg).size());
  auto entries = match_tensor_table(m, expected_tensors(s.cfg));
  for (const auto& e : entries)
    EXPECT_EQ(e.file.filename().string(), e.name.find("layers.1.") != std::string::npos
                                              ? "model-00002-of-00002.safetensors"
                                              : "model-00001-of-00002.safetensors");
  // A tensor missing from every shard is named against the index.
  std::erase_if(s.second, [](const TensorSpec& t) {
    return t.name == "model.layers.1.mlp.down_proj.weight";
  });
  write_model_file(s.dir / "model-00002-of-00002.safetensors", s.second);
  s.index["weight_map"].erase("model.layers.1.mlp.down_proj.weight");
  s.write_index();
  EXPECT_THAT(match_error(s.dir, s.cfg),
              HasSubstr("model.safetensors.index.json: missing 1 tensor the config needs: "
                        "model.layers.1.mlp.down_proj.weight"));
}

TEST(Safetensors, ShardedIndexErrors) {
  auto open_error = [](const fs::path& p) { return error_of([&] { open_safetensors_model(p); }); };
  {
    Sharded s("st_shard_missing_file");
    fs::remove(s.dir / "model-00002-of-00002.safetensors");
    EXPECT_THAT(open_error(s.dir), HasSubstr("model-00002-of-00002.safetensors (named in"));
    EXPECT_THAT(open_error(s.dir), HasSubstr("does not exist"));
  }
  {
    Sharded s("st_shard_wrong_map");
    s.index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
    s.write_index();
    EXPECT_THAT(open_error(s.dir),
                HasSubstr("maps model.norm.weight to model-00002-of-00002.safetensors, "
                          "but it is stored in"));
  }
  {
    Sharded s("st_shard_phantom");
    s.index["weight_map"]["model.layers.7.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors";
    s.write_index();
    EXPECT_THAT(open_error(s.dir),
                HasSubstr("maps model.layers.7.mlp.up_proj.weight to "
                          "model-00002-of-00002.safetensors, which does not contain it"));
  }
  {
    Sharded s("st_shard_path");
    s.index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
    s.write_index();
    EXPECT_THAT(open_error(s.dir), HasSubstr("expected a file name in the same directory"));
  }
  {
    Sharded s("st_shard_dup");
    auto both = s.second;
    both.push_back(s.first[0]);
    write_model_file(s.dir / "model-00002-of-00002.safetensors", both);
    EXPECT_THAT(open_error(s.dir), HasSubstr("tensor model.embed_tokens.weight appears in both"));
  }
  {
    Sharded s("st_shard_json");
    std::ofstream(s.dir / "model.safetensors.index.json") << "{\"weight_map\": {";
    EXPECT_THAT(open_error(s.dir), HasSubstr("model.safetensors.index.json is not valid JSON"));
    std::ofstream(s.dir / "model.safetensors.index.json") << "{\"metadata\": {}}";
    EXPECT_THAT(open_error(s.dir), HasSubstr("expected an object with a \"weight_map\" object"));
  }
}

// Random corruptions of a valid header either parse or throw lantern::Error:
// no other exception, no crash (run under ASan too).
TEST(Safetensors, CorruptHeadersFailCleanly) {
  const std::string valid = safetensors_layout(expected_tensors(micro_config())).prefix.substr(8);
  const uint64_t file_bytes = 8 + valid.size() + 100000;
  const std::string alphabet = "{}[]\",:-.e0123456789 aBF16\\";
  std::mt19937_64 rng(test::test_seed());
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string h = valid;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % h.size();
      const char c = alphabet[rng() % alphabet.size()];
      // Rebuilt with substr (GCC 12 misreports -Wrestrict on in-place insert/erase).
      switch (rng() % 3) {
        case 0:
          h[pos] = c;
          break;
        case 1:
          h = h.substr(0, pos) + h.substr(std::min(h.size(), pos + 1 + rng() % 8));
          break;
        default:
          h = h.substr(0, pos) + c + h.substr(pos);
          break;
      }
      if (h.empty()) h.push_back('{');
    }
    try {
      parse_safetensors_header(h, "fuzz.safetensors", file_bytes);
    } catch (const Error& err) {
      ++errors;
      EXPECT_THAT(err.what(), HasSubstr("fuzz.safetensors"));
    } catch (const std::exception& other) {
      ADD_FAILURE() << "non-lantern exception " << other.what() << " for header " << h;
    }
  }
  EXPECT_GT(errors, 1000);  // most corruptions are caught
}

}  // namespace
}  // namespace lantern
