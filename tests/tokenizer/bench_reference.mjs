// Encode throughput of the JS reference tokenizer (@lenml/tokenizers, as
// shipped: no patches), for tests/bench/bench_tokenizer.cpp to compare with.
//
//   node tests/tokenizer/bench_reference.mjs TOKENIZER_DIR FILE [FILE...]
//
// Prints one JSON object per file: {"file", "bytes", "ids", "seconds", "mb_per_s"}
// (MB = 10^6 bytes of UTF-8 input; single thread; best of the timed runs
// after one warm-up run, like Google Benchmark's steady state).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "../../third_party/npm/node_modules/@lenml/tokenizers/dist/main.mjs";

const [dir, ...files] = process.argv.slice(2);
if (!files.length) {
  console.error("usage: node bench_reference.mjs TOKENIZER_DIR FILE [FILE...]");
  process.exit(2);
}
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")),
});

for (const file of files) {
  const bytes = readFileSync(file);
  const text = bytes.toString("utf8");
  let ids = tok.encode(text, { add_special_tokens: false }).length;  // warm-up (JIT, caches)
  let best = Infinity;
  const start = performance.now();
  for (let run = 0; run < 5 && (run < 2 || performance.now() - start < 3000); run++) {
    const t0 = performance.now();
    ids = tok.encode(text, { add_special_tokens: false }).length;
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  console.log(JSON.stringify({ file, bytes: bytes.length, ids, seconds: best, mb_per_s: bytes.length / 1e6 / best }));
}
