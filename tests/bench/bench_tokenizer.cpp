// Tokenizer throughput: Lantern's encode (single thread) against the JS
// reference (@lenml/tokenizers, run by tests/tokenizer/bench_reference.mjs on
// the same text in the same run), plus decode, streaming decode and load.
//
//   build/<preset>/bench/bench_tokenizer [--benchmark_filter=Encode]
//
// Two texts, both generated from tests/tokenizer/corpus.jsonl with a fixed seed:
//   mixed        2 MB of corpus fragments (every script, code, emoji, specials);
//                frequent pieces repeat, as in real text
//   fresh-words  1 MB of random words over many scripts: mostly cache misses
// Set LANTERN_BENCH_NO_JS=1 to skip the JS measurement.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>

#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer_test_util.h"

namespace {

using namespace lantern;
using namespace lantern::tokenizer_test;

struct BenchText {
  std::string name, text;
  fs::path file;
};

std::vector<BenchText>& texts() {
  static std::vector<BenchText> t;
  return t;
}
std::map<std::string, double>& lantern_mbps() {
  static std::map<std::string, double> m;
  return m;
}

std::string make_mixed(size_t bytes) {
  std::mt19937_64 rng(20240726);
  const auto corpus = load_corpus();
  std::string out;
  while (out.size() < bytes) {
    out += random_corpus_mix(corpus, rng);
    out += pick(rng, 4) == 0 ? "\n\n" : " ";
  }
  return out;
}

std::string make_fresh_words(size_t bytes) {
  std::mt19937_64 rng(7);
  static const std::pair<uint32_t, uint32_t> scripts[] = {
      {'a', 'z'}, {'a', 'z'}, {'a', 'z'}, {0x430, 0x44F}, {0x3B1, 0x3C9}, {0x5D0, 0x5EA},
      {0x627, 0x64A}, {0x915, 0x939}, {0xE01, 0xE2E}, {0xAC00, 0xD7A3}, {0x4E00, 0x9FA5}, {'0', '9'}};
  static const char* seps[] = {" ", " ", " ", ", ", ". ", "\n", " (", ") ", ": ", " - "};
  std::string out;
  while (out.size() < bytes) {
    const auto [lo, hi] = scripts[pick(rng, std::size(scripts))];
    const size_t len = 2 + pick(rng, 9);
    for (size_t i = 0; i < len; ++i) utf8::append_code_point(lo + static_cast<uint32_t>(pick(rng, hi - lo + 1)), out);
    out += seps[pick(rng, std::size(seps))];
  }
  return out;
}

const Tokenizer& tok() { return llama3(); }

void BM_Encode(benchmark::State& state, const BenchText* t) {
  std::vector<int32_t> ids;
  tok().encode_into(t->text, ids);  // warm the piece cache, as the JS side warms up too
  size_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ids.clear();
    tok().encode_into(t->text, ids);
    benchmark::DoNotOptimize(ids.data());
    ++runs;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  lantern_mbps()[t->name] = runs * t->text.size() / 1e6 / s;
  state.SetBytesProcessed(static_cast<int64_t>(runs * t->text.size()));
  state.counters["ids"] = static_cast<double>(ids.size());
}

void BM_Decode(benchmark::State& state) {
  const BenchText& t = texts()[0];
  const auto ids = tok().encode(t.text);
  for (auto _ : state) benchmark::DoNotOptimize(tok().decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.text.size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_StreamDecode(benchmark::State& state) {
  const BenchText& t = texts()[0];
  const auto ids = tok().encode(t.text);
  for (auto _ : state) {
    StreamDecoder stream(tok());
    size_t n = 0;
    for (int32_t id : ids) n += stream.push(id).size();
    benchmark::DoNotOptimize(n += stream.flush().size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.text.size()));
}
BENCHMARK(BM_StreamDecode)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Tokenizer::load(npm_dir() / "llama3").vocab_size());
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

// {name -> MB/s} from the JS reference, or empty with a note on stderr.
std::map<std::string, double> measure_js() {
  std::map<std::string, double> out;
  std::string why;
  if (std::getenv("LANTERN_BENCH_NO_JS")) return out;
  if (!reference_available(&why)) {
    std::fprintf(stderr, "bench_tokenizer: JS reference not measured: %s\n", why.c_str());
    return out;
  }
  std::string cmd = "node '" + (test::test_data_dir() / "tokenizer" / "bench_reference.mjs").string() + "' '" +
                    (npm_dir() / "llama3").string() + "'";
  for (const auto& t : texts()) cmd += " '" + t.file.string() + "'";
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  std::string all;
  while (pipe && fgets(buf, sizeof buf, pipe)) all += buf;
  if (!pipe || pclose(pipe) != 0) {
    std::fprintf(stderr, "bench_tokenizer: the JS benchmark failed: %s\n", all.c_str());
    return out;
  }
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("mb_per_s")) continue;
    for (const auto& t : texts())
      if (t.file.string() == j["file"]) out[t.name] = j["mb_per_s"];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = fs::path(LANTERN_BINARY_DIR) / "bench" / "tokenizer-bench";
  fs::create_directories(dir);
  texts() = {{"mixed", make_mixed(2'000'000), dir / "mixed.txt"},
             {"fresh-words", make_fresh_words(1'000'000), dir / "fresh-words.txt"}};
  for (const auto& t : texts()) {
    write_file(t.file, t.text);
    benchmark::RegisterBenchmark(("BM_Encode/" + t.name).c_str(), BM_Encode, &t)->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fprintf(stderr, "bench_tokenizer: measuring the JS reference on the same texts...\n");
  const auto js = measure_js();
  tok();  // load outside the timed runs
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::printf("\nencode throughput, single thread (MB = 10^6 bytes of UTF-8 input)\n");
  std::printf("%-12s %10s %14s %10s %8s\n", "text", "bytes", "lantern MB/s", "JS MB/s", "ratio");
  for (const auto& t : texts()) {
    auto l = lantern_mbps().find(t.name);
    auto j = js.find(t.name);
    if (l == lantern_mbps().end()) continue;
    if (j == js.end())
      std::printf("%-12s %10zu %14.1f %10s %8s\n", t.name.c_str(), t.text.size(), l->second, "-", "-");
    else
      std::printf("%-12s %10zu %14.1f %10.2f %7.1fx\n", t.name.c_str(), t.text.size(), l->second, j->second,
                  l->second / j->second);
  }
  return 0;
}
