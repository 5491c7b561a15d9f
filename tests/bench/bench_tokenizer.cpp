// Tokenizer throughput: Lantern's encode (single thread) against the JS
// reference (@lenml/tokenizers, run by tests/tokenizer/bench_reference.mjs on
// the same text in the same run), plus decode, streaming decode and load.
//
//   build/<preset>/bench/bench_tokenizer [--benchmark_filter=Encode]
//
// Two texts, both generated from tests/tokenizer/corpus.jsonl with a fixed seed
// and cut into ~64 KB documents at spaces (each encoded by its own call, on
// both sides; the JS port slows down superlinearly on multi-MB strings):
//   mixed        2 MB of corpus fragments (every script, code, emoji, specials);
//                frequent pieces repeat, as in real text
//   fresh-words  1 MB of random words over many scripts: mostly cache misses
// Set LANTERN_BENCH_NO_JS=1 to skip the JS measurement.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <map>

#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer_test_util.h"

namespace {

using namespace lantern;
using namespace lantern::tokenizer_test;

struct BenchText {
  std::string name, text;
  fs::path file;                       // the documents as JSONL, for the JS side
  std::vector<std::string_view> docs;  // ~64 KB pieces of text, cut at spaces
};

void cut_documents(BenchText& t) {
  constexpr size_t kDoc = 64 * 1024;
  std::string jsonl;
  for (size_t pos = 0; pos < t.text.size();) {
    size_t end = t.text.find(' ', std::min(t.text.size(), pos + kDoc));
    end = end == std::string::npos ? t.text.size() : end;
    t.docs.push_back(std::string_view(t.text).substr(pos, end - pos));
    jsonl += json({{"text", t.docs.back()}}).dump() + "\n";
    pos = end;
  }
  write_file(t.file, jsonl);
}

std::vector<BenchText>& texts() {
  static std::vector<BenchText> t;
  return t;
}
// MB/s by wall clock and by CPU time (of the encoding thread / the node process).
struct Speed {
  double wall = 0, cpu = 0;
};
std::map<std::string, Speed>& lantern_speed() {
  static std::map<std::string, Speed> m;
  return m;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
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
      {'a', 'z'},     {'a', 'z'},       {'a', 'z'},       {0x430, 0x44F},
      {0x3B1, 0x3C9}, {0x5D0, 0x5EA},   {0x627, 0x64A},   {0x915, 0x939},
      {0xE01, 0xE2E}, {0xAC00, 0xD7A3}, {0x4E00, 0x9FA5}, {'0', '9'}};
  static const char* seps[] = {" ", " ", " ", ", ", ". ", "\n", " (", ") ", ": ", " - "};
  std::string out;
  while (out.size() < bytes) {
    const auto [lo, hi] = scripts[pick(rng, std::size(scripts))];
    const size_t len = 2 + pick(rng, 9);
    for (size_t i = 0; i < len; ++i)
      utf8::append_code_point(lo + static_cast<uint32_t>(pick(rng, hi - lo + 1)), out);
    out += seps[pick(rng, std::size(seps))];
  }
  return out;
}

const Tokenizer& tok() {
  return llama3();
}

void BM_Encode(benchmark::State& state, const BenchText* t) {
  std::vector<int32_t> ids;
  for (auto doc : t->docs) tok().encode_into(doc, ids);  // warm-up, as on the JS side
  size_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    ids.clear();
    for (auto doc : t->docs) tok().encode_into(doc, ids);
    benchmark::DoNotOptimize(ids.data());
    ++runs;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mb = runs * t->text.size() / 1e6;
  lantern_speed()[t->name] = {mb / wall, mb / (thread_cpu_seconds() - cpu_start)};
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
std::map<std::string, Speed> measure_js() {
  std::map<std::string, Speed> out;
  std::string why;
  if (std::getenv("LANTERN_BENCH_NO_JS")) return out;
  if (!reference_available(&why)) {
    std::fprintf(stderr, "bench_tokenizer: JS reference not measured: %s\n", why.c_str());
    return out;
  }
  std::string cmd = "node '" +
                    (test::test_data_dir() / "tokenizer" / "bench_reference.mjs").string() + "' '" +
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
      if (t.file.string() == j["file"]) out[t.name] = {j["mb_per_s"], j["cpu_mb_per_s"]};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = fs::path(LANTERN_BINARY_DIR) / "bench" / "tokenizer-bench";
  fs::create_directories(dir);
  texts() = {{"mixed", make_mixed(2'000'000), dir / "mixed.jsonl", {}},
             {"fresh-words", make_fresh_words(1'000'000), dir / "fresh-words.jsonl", {}}};
  for (auto& t : texts()) {
    cut_documents(t);
    benchmark::RegisterBenchmark(("BM_Encode/" + t.name).c_str(), BM_Encode, &t)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fprintf(stderr, "bench_tokenizer: measuring the JS reference on the same texts...\n");
  const auto js = measure_js();
  tok();  // load outside the timed runs
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::printf("\nencode throughput, single thread, MB/s (MB = 10^6 bytes of UTF-8 input)\n");
  std::printf("%-12s %9s | %12s %12s | %9s %9s | %7s %7s\n", "text", "bytes", "lantern wall",
              "lantern cpu", "JS wall", "JS cpu", "ratio w", "ratio c");
  for (const auto& t : texts()) {
    auto l = lantern_speed().find(t.name);
    if (l == lantern_speed().end()) continue;
    auto j = js.find(t.name);
    const Speed js_speed = j == js.end() ? Speed{} : j->second;
    std::printf("%-12s %9zu | %12.1f %12.1f | %9.3f %9.3f | %6.0fx %6.0fx\n", t.name.c_str(),
                t.text.size(), l->second.wall, l->second.cpu, js_speed.wall, js_speed.cpu,
                js_speed.wall > 0 ? l->second.wall / js_speed.wall : 0.0,
                js_speed.cpu > 0 ? l->second.cpu / js_speed.cpu : 0.0);
  }
  return 0;
}
