// Reference tokenizer for Lantern's tests: the JS port of Hugging Face
// tokenizers (@lenml/tokenizers, installed by scripts/setup.sh into
// third_party/npm) run on the same tokenizer.json / tokenizer_config.json.
//
//   node tests/tokenizer/reference.mjs TOKENIZER_DIR REQUESTS.jsonl OUT.jsonl
//
// One request per line, one answer per line, in order:
//   {"op":"encode","hex":"...","special":true,"add_special":false} -> {"ids":[...]}
//      (text may be given as "text" instead of "hex"; hex bytes are decoded with
//       TextDecoder, so invalid UTF-8 becomes U+FFFD as in Lantern)
//   {"op":"decode","ids":[...],"skip_special":false}                -> {"hex":"..."}
//   {"op":"chat","messages":[...],"add_generation_prompt":true,"date":"..."}
//                                                                   -> {"hex":"...","ids":[...]}
//   any failure                                                     -> {"error":"..."}
//
// Two deliberate adjustments make the port agree with HF's Rust tokenizers,
// which compile the Split regex with Oniguruma:
//  1. \s and \S are spelled out as Unicode White_Space (Oniguruma's \s). JS's
//     own \s also matches U+FEFF and misses U+0085.
//  2. The port rewrites (?i:'s|'t|...) as [sS]-style classes, losing the
//     case-insensitive match of U+017F (long s) that Oniguruma keeps.
// "special": false builds the tokenizer without its special added tokens,
// which is HF's split_special_tokens=True.
// The port's Jinja lacks two things the Llama 3.1 templates use on tool
// results: the `mapping` test and `tojson` on strings. For the string contents
// sent here `content is mapping or content is iterable` is `is iterable`, and
// Python's `content | tojson` (json.dumps, ensure_ascii=False) equals
// JSON.stringify(content): the reference encodes tool/ipython contents itself
// and the template prints them as they are.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "../../third_party/npm/node_modules/@lenml/tokenizers/dist/main.mjs";

const WHITE_SPACE =
  "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const CONTRACTIONS_HF = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const CONTRACTIONS_JS = "(?:'([sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";

function onigurumaToJs(pattern) {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\" && i + 1 < pattern.length) {
      const d = pattern[++i];
      if (d === "s") out += inClass ? WHITE_SPACE : `[${WHITE_SPACE}]`;
      else if (d === "S") {
        if (inClass) throw new Error("\\S inside a class is not supported");
        out += `[^${WHITE_SPACE}]`;
      } else out += c + d;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out.replaceAll(CONTRACTIONS_HF, CONTRACTIONS_JS);
}

function patchPreTokenizer(pt) {
  if (!pt) return;
  if (pt.type === "Sequence") pt.pretokenizers.forEach(patchPreTokenizer);
  if (pt.type === "Split" && pt.pattern?.Regex !== undefined)
    pt.pattern.Regex = onigurumaToJs(pt.pattern.Regex);
}

let toolsAsJson = false;  // the template JSON-encodes tool results (Llama 3.1 form)

function load(dir, withSpecials) {
  const tokenizerJSON = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  patchPreTokenizer(tokenizerJSON.pre_tokenizer);
  if (!withSpecials) tokenizerJSON.added_tokens = tokenizerJSON.added_tokens.filter((t) => !t.special);
  // Jinja drops one trailing newline of a template (keep_trailing_newline=False).
  if (typeof tokenizerConfig.chat_template === "string") {
    toolsAsJson = tokenizerConfig.chat_template.includes("message.content | tojson");
    tokenizerConfig.chat_template = tokenizerConfig.chat_template
      .replace(/\n$/, "")
      .replaceAll("message.content is mapping or message.content is iterable", "message.content is iterable")
      .replaceAll("message.content | tojson", "message.content");
  }
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

const [dir, requestsPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node reference.mjs TOKENIZER_DIR REQUESTS.jsonl OUT.jsonl");
  process.exit(2);
}
const tok = load(dir, true);
let plain = null;  // built on first use: loading costs about a second
const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const hex = (s) => Buffer.from(s, "utf8").toString("hex");

function answer(r) {
  if (r.op === "encode") {
    const text = r.text ?? utf8.decode(Buffer.from(r.hex, "hex"));
    const t = r.special === false ? (plain ??= load(dir, false)) : tok;
    return { ids: t.encode(text, { add_special_tokens: !!r.add_special }) };
  }
  if (r.op === "decode") {
    if (r.ids.length === 0) return { hex: "" };  // the port rejects an empty list
    const opts = { skip_special_tokens: !!r.skip_special, clean_up_tokenization_spaces: false };
    return { hex: hex(tok.decode(r.ids, opts)) };
  }
  if (r.op === "chat") {
    const kwargs = { tokenize: false, add_generation_prompt: !!r.add_generation_prompt };
    if (r.date !== undefined) kwargs.date_string = r.date;
    const messages = r.messages.map((m) =>
      toolsAsJson && (m.role === "tool" || m.role === "ipython") ? { ...m, content: JSON.stringify(m.content) } : m);
    const text = tok.apply_chat_template(messages, kwargs);
    return { hex: hex(text), ids: tok.encode(text, { add_special_tokens: false }) };
  }
  throw new Error(`unknown op ${r.op}`);
}

const lines = readFileSync(requestsPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = lines.map((line) => {
  try {
    return JSON.stringify(answer(JSON.parse(line)));
  } catch (e) {
    return JSON.stringify({ error: String(e?.message ?? e) });
  }
});
writeFileSync(outPath, out.join("\n") + "\n");
