// Encode throughput of the JS reference tokenizer (@lenml/tokenizers, as
// shipped: no patches), for tests/bench/bench_tokenizer.cpp to compare with.
//
//   node tests/tokenizer/bench_reference.mjs TOKENIZER_DIR FILE.jsonl [FILE.jsonl...]
//
// Each FILE holds one {"text": ...} document per line; a run encodes every
// document (one encode() call each, as batch users do). Documents are kept to
// ~64 KB because the port slows down superlinearly on multi-megabyte strings.
//
// Prints one JSON object per file: {"file", "bytes", "ids", "seconds",
// "mb_per_s", "cpu_seconds", "cpu_mb_per_s"}: MB = 10^6 bytes of UTF-8 input;
// the best of the timed runs after one warm-up run (JIT, caches), by wall
// clock and by process CPU time (which stays meaningful on a busy machine;
// it includes V8's helper threads, e.g. the garbage collector).
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
  const docs = readFileSync(file, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l).text);
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);
  const encodeAll = () => docs.reduce((n, d) => n + tok.encode(d, { add_special_tokens: false }).length, 0);
  let ids = encodeAll();  // warm-up (JIT, caches)
  let best = Infinity, bestCpu = Infinity;
  const start = performance.now();
  for (let run = 0; run < 5 && (run < 2 || performance.now() - start < 3000); run++) {
    const t0 = performance.now(), c0 = process.cpuUsage();
    ids = encodeAll();
    const c = process.cpuUsage(c0);
    best = Math.min(best, (performance.now() - t0) / 1000);
    bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
  }
  const mb = bytes / 1e6;
  console.log(JSON.stringify({ file, bytes, ids, seconds: best, mb_per_s: mb / best,
                               cpu_seconds: bestCpu, cpu_mb_per_s: mb / bestCpu }));
}
