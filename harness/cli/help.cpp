// `lantern help [CMD]` and the text every `lantern CMD --help` prints: usage,
// each option with its default, one example. Kept in one file so the
// commands' own files stay about what they do.
#include <cstdio>
#include <map>
#include <string>

#include "harness/cli/command.h"
#include "harness/experiment/schema.h"
#include "harness/harness_options.h"

namespace lantern::cli {

namespace {

const char* kEngineOptions =
    "engine options:\n"
    "  --model DIR             HF model directory (config.json, model.safetensors, "
    "tokenizer.json); required\n"
    "  --device cpu|cuda       backend (default: cuda when a GPU is usable, else cpu)\n"
    "  --limits FILE.json      EngineLimits as JSON (default: built-in limits)\n"
    "  --max-batch-tokens N    rows in one step (default 512)\n"
    "  --max-seqs N            concurrent sequences (default 16)\n"
    "  --max-context N         tokens per sequence (default 4096, capped at the model's limit)\n"
    "  --kv-block-size N       tokens per KV block (default 16)\n"
    "  --kv-blocks N           KV blocks (default 0: from --kv-fraction on cuda, "
    "max_seqs*max_context on cpu)\n"
    "  --kv-fraction F         cuda: share of free memory for the KV pool (default 0.9)\n"
    "  --kernels F=V,...       kernel variant per family by name or number (default: fastest "
    "verified); fusion=off runs the unfused op table (default fusion=on);\n"
    "                          prefill_graphs=off runs prefill steps eagerly (default on);\n"
    "                          overlap=off waits for each decode step before planning the next (default on);\n"
    "                          prune_last=off runs the last layer on every prompt row, not only the\n"
    "                          rows whose logits are taken (default on);\n"
    "                          fold_attention=on|off runs each layer's q/k/v projection and decode\n"
    "                          attention as one op in decode steps with contexts <= 512 (default\n"
    "                          auto: when the qkv_rope variant folds it, e.g. qkv_rope=4);\n"
    "                          final_fuse=on ends the last layer with the final norm in decode steps\n"
    "                          (down_proj, residual and final_norm as one op; default off)\n"
    "  --no-cuda-graphs        run decode and prefill steps eagerly (default: graphs on)\n"
    "  --tp N                  tensor parallelism over N processes, one per GPU (GPUs --gpu..\n"
    "                          --gpu+N-1; cpu: N processes); N must divide the KV heads\n"
    "                          (default: off; docs/tensor-parallel.md)\n"
    "  --tp-lm-head replicated|split  with --tp: every rank the whole LM head, or V/N vocabulary\n"
    "                          rows each and an all_gather of the logits (N must divide the\n"
    "                          vocabulary) (default: replicated)\n"
    "  --tp-allreduce auto|nccl|p2p  with --tp on cuda: the all_reduce path; auto: the P2P kernel\n"
    "                          up to 4 MiB when the GPUs map each other, else NCCL (default:\n"
    "                          LANTERN_TP_ALLREDUCE, else auto; e.g. --tp 2 --tp-allreduce nccl)\n"
    "  --quiet                 no load / budget / per-request lines on stderr\n";

const char* kExperimentOptions =
    "  --set PATH=VALUE        override one field of the experiment (repeatable; VALUE is JSON or "
    "a bare\n"
    "                          string), e.g. --set limits.max_seqs=4 --set "
    "kernels.attention_decode=seed\n"
    "  --out DIR               run directory (default runs/<UTC time>-<name>)\n"
    "  --quiet                 no progress or load lines on stderr\n";

std::map<std::string, std::string> build() {
  std::map<std::string, std::string> h;
  h["run"] =
      std::string(
          "usage: lantern run EXP.json [--set PATH=VALUE ...] [--out DIR] [--dry-run] "
          "[--workload-out FILE]\n"
          "Runs an experiment file (docs/experiments.md): validates it before anything loads, "
          "resolves the\n"
          "model (synthesising a preset once), runs warm-ups and repetitions and writes one run "
          "directory\n"
          "(metrics per repetition + median/min/max). An experiment with a \"sweep\" section runs "
          "its grid.\n\n"
          "options:\n") +
      kExperimentOptions +
      "  --dry-run               validate and build the workload, then stop (default: run)\n"
      "  --workload-out FILE     write the expanded workload as .jsonl (the peers read it) "
      "(default: none)\n"
      "  --resolved-out FILE     write the resolved experiment (defaults and --set applied) "
      "(default: none)\n"
      "  --tp N                  tensor parallelism over N processes, one per GPU; ranks R > 0 record\n"
      "                          into DIR/rank-R (default: off; not with sweeps; "
      "docs/tensor-parallel.md)\n"
      "  --tp-lm-head replicated|split  with --tp: the LM head on every rank, or V/N vocabulary rows\n"
      "                          per rank and an all_gather of the logits (default: replicated)\n"
      "  --tp-allreduce auto|nccl|p2p  with --tp on cuda: the all_reduce path (default:\n"
      "                          LANTERN_TP_ALLREDUCE, else auto; e.g. --tp 2 --tp-allreduce nccl)\n\n"
      "example:\n  lantern run experiments/decode-latency.json --set repetitions=5 --out runs/dl\n";
  h["rerun"] =
      std::string(
          "usage: lantern rerun RUN_DIR [--set PATH=VALUE ...] [--out DIR] [--check] [--tp N] "
          "[--tp-lm-head L] [--tp-allreduce P]\n"
          "Reruns a recorded run from its manifest alone (same resolved experiment, device and "
          "model),\n"
          "says whether the weights' hash, the tokenizer's hash or the commit differ, and whether "
          "the\n"
          "generated tokens are identical to the recorded ones.\n\n"
          "options:\n") +
      kExperimentOptions +
      "  --check                 exit 1 when any request's tokens differ (default: report only)\n"
      "  --tp N                  tensor-parallel ranks (default: as recorded, config.tensor_parallel.world\n"
      "                          in the manifest; a one-process run reruns on one process)\n"
      "  --tp-lm-head replicated|split  with --tp: the LM head layout (default: as recorded,\n"
      "                          config.tensor_parallel.lm_head; replicated when absent)\n"
      "  --tp-allreduce auto|nccl|p2p  with --tp: the all_reduce path (default: as recorded,\n"
      "                          config.tensor_parallel.all_reduce_path; else LANTERN_TP_ALLREDUCE,\n"
      "                          else auto; e.g. --tp-allreduce nccl). Every rank pins the GEMM plans\n"
      "                          recorded in its manifest (RUN/rank-R/manifest.json)\n\n"
      "example:\n  lantern rerun runs/20261201-030000-default --check\n";
  h["compare"] =
      "usage: lantern compare RUN_A RUN_B [RUN ...] [--csv | --markdown] [--no-kernels]\n"
      "One table of serving metrics (median over repetitions) and kernel time per op call, per "
      "family\n"
      "and on each step's critical path (PDL-overlapped kernels charged once),\n"
      "side by side with ratios to the first run; '*' marks a difference outside the noise band "
      "measured\n"
      "from the repetitions ('~' inside). Then the config diff. Peers' run directories compare "
      "too.\n\n"
      "options:\n"
      "  --csv                   CSV tables (default: aligned text)\n"
      "  --markdown              GitHub Markdown tables (default: aligned text)\n"
      "  --no-kernels            metrics and config diff only (default: with kernel tables)\n\n"
      "example:\n  lantern compare runs/attn-seed runs/attn-ours --markdown\n";
  h["sweep"] =
      std::string(
          "usage: lantern sweep EXP.json --param PATH=V1,V2,... [--param ...] [--set PATH=VALUE "
          "...] "
          "[--out DIR]\n"
          "Runs the grid of the --param values (and the experiment's own \"sweep\" section), one "
          "run\n"
          "directory per point under one sweep directory, and writes sweep.csv (one row per "
          "point).\n\n"
          "options:\n"
          "  --param PATH=V1,V2      a swept field (repeatable; the last varies fastest)\n") +
      kExperimentOptions +
      "  (--out here is the sweep directory; default runs/<UTC time>-<name>-sweep)\n\n"
      "example:\n  lantern sweep experiments/decode-latency.json --param limits.max_seqs=1,2,4,8\n";
  h["generate"] =
      std::string(
          "usage: lantern generate --model DIR (--prompt TEXT | --prompt-ids IDS | --requests "
          "FILE.jsonl) "
          "[options]\n"
          "Generates from a prompt and streams the text (or ids) to stdout; summary lines go to "
          "stderr.\n\n"
          "options:\n"
          "  --prompt TEXT           prompt text (BOS prepended) (default: none)\n"
          "  --chat                  wrap --prompt in the Llama 3 chat template (default: off)\n"
          "  --system TEXT           system message (implies --chat) (default: none)\n"
          "  --chat-form llama3|llama31  template form (default: from tokenizer_config.json)\n"
          "  --date TEXT             llama31 \"Today Date\" (default 26 Jul 2024)\n"
          "  --prompt-ids IDS        token ids, comma or space separated (default: none)\n"
          "  --requests FILE.jsonl   a batch: {\"prompt\"|\"prompt_ids\", max_new_tokens, ...} a "
          "line\n"
          "  --max-new-tokens N      tokens to generate (default 32)\n"
          "  --temperature T         0: greedy (default 0)\n"
          "  --top-k K               0: off (default 0)\n"
          "  --top-p P               1: off (default 1)\n"
          "  --seed N                sampling seed (default 0)\n"
          "  --ignore-eos            keep going past EOS (default: stop)\n"
          "  --repeat N              submit the prompt N times (default 1)\n"
          "  --ids                   print token ids instead of text (default: text)\n"
          "  --out FILE.jsonl        write one result per request (default: none)\n"
          "  --gemm-plans FILE       run gemm.6's cuBLASLt plans recorded in FILE (a bench --json\n"
          "                          file, a run directory or its manifest.json) instead of timing\n"
          "                          them at start-up, so two recordings run the same GEMM algorithms\n"
          "                          (default: time them)\n") +
      kEngineOptions + harness::harness_options_help() +
      "\nexample:\n  lantern generate --model models/llama-3.2-1b --prompt \"Why is the sky "
      "blue?\" --chat "
      "--max-new-tokens 64\n";
  h["bench"] =
      std::string(
          "usage: lantern bench --model DIR [--batch B] [--prompt-len P] [--decode-steps N] "
          "[options]\n"
          "Decode and prefill throughput against the roofline measured in the same run.\n"
          "The decode step is the median over the steps that decode the whole batch (no\n"
          "prompt rows; with batch x prompt > --max-batch-tokens early sequences decode\n"
          "while later ones prefill, and the first finish before the last); prefill is\n"
          "the sum over the steps that carry prompt rows. On CUDA each point also reads the\n"
          "GPU's clocks through NVML (when the driver's libnvidia-ml is there): the SM clock\n"
          "sampled every millisecond and the time the power / thermal policy held it down\n"
          "(the GPU clocks line; --json: gpu_clocks; a throttled sweep row says so).\n\n"
          "options:\n"
          "  --batch B[,B...]        requests decoded together (default 1); a list sweeps\n"
          "  --prompt-len P[,P...]   random prompt tokens each (default 128); a list sweeps.\n"
          "                          With a list, one engine (sized for the largest point)\n"
          "                          runs every (batch, prompt) point and prints a table of\n"
          "                          prefill and decode step with their floors and share of roofline\n"
          "  --decode-steps N        tokens generated each (default 128); too few for the\n"
          "                          prefill's length leaves no whole-batch step (a warning;\n"
          "                          the step is then the median of the partial-batch steps)\n"
          "  --seed N                seed of the random prompts and draws (default 1)\n"
          "  --temperature T         0: greedy decode, argmax (default 0); > 0: every step\n"
          "                          samples (the sample kernel family runs)\n"
          "  --top-k K               with --temperature: 0 off (default 0)\n"
          "  --top-p P               with --temperature: 1 off (default 1)\n"
          "  --bandwidth-gbs X       roofline bandwidth (default 0: measure a device copy)\n"
          "  --json FILE             also write the numbers as JSON (default: none)\n"
          "  --gemm-plans FILE       run gemm.6's cuBLASLt plans recorded in FILE (a --json file of\n"
          "                          an earlier CUDA bench, a run directory or its manifest.json)\n"
          "                          instead of timing them at start-up: two processes then run the\n"
          "                          same GEMM algorithms, for A/B runs (default: time them).\n"
          "                          Even with the same plans a 512-token prefill differs by up to\n"
          "                          ~0.15 ms between processes on the H200 (the GPU's own time:\n"
          "                          its power policy, see the GPU clocks line): compare medians\n"
          "                          over interleaved processes (scripts/gpu-ab.sh)\n"
          "  --gpu-clocks MODE       CUDA: sample (default: NVML readings around each point and the\n"
          "                          SM clock every millisecond on a spare core), read (the\n"
          "                          readings only) or off (no NVML)\n"
          "  --verbose               list the per-shape GEMM plans gemm.6 measured at start-up\n"
          "                          (without it, one line counts them)\n") +
      kEngineOptions +
      "\nexample:\n  lantern bench --model models/llama-3.2-1b --device cuda --batch 8 "
      "--prompt-len 128 "
      "--decode-steps 128\n"
      "  lantern bench --model models/llama-3.2-1b --batch 1,8,64,256 --decode-steps 32\n"
      "  lantern bench --model models/llama-3.2-1b --device cuda --prompt-len 512 --json a.json\n"
      "  lantern bench --model models/llama-3.2-1b --device cuda --prompt-len 512 --gemm-plans a.json "
      "--kernels attention_prefill=2\n";
  h["score"] = std::string(
                   "usage: lantern score --model DIR --ids-file FILE --out LOGITS.bin "
                   "[--prefill-tokens N] [options]\n"
                   "Teacher-forced logits of a token sequence: float32 [positions x vocab], "
                   "little-endian.\n\n"
                   "options:\n"
                   "  --ids-file FILE         token ids, comma or space separated (required)\n"
                   "  --out FILE              logits file to write (required)\n"
                   "  --prefill-tokens N      ids prefilled in one step, the rest decoded "
                   "(default: all)\n") +
               kEngineOptions +
               "\nexample:\n  lantern score --model DIR --ids-file ids.txt --out logits.bin "
               "--prefill-tokens 17\n";
  h["inspect"] =
      "usage: lantern inspect RUN_DIR [--compare OTHER_RUN] [--top N] [--phase "
      "prefill|decode|mixed] "
      "[--by op|kernel] [--gaps] [--check]\n"
      "Summarises a run directory: top ops or kernels with rates and roofline share, alias plan, "
      "KV, memory map.\n"
      "The top table's wall columns charge each kernel only its end past the latest end before it in "
      "its step (what removing it would save when launches overlap through PDL); the footnote gives "
      "the busy and idle time inside steps.\n\n"
      "options:\n"
      "  --top N                 rows in the top table (default 15)\n"
      "  --phase P               only steps of this phase (default: all)\n"
      "  --by op|kernel          group by op or by GPU kernel (default op)\n"
      "  --gaps                  also list the idle time inside steps by the ops around each gap "
      "(default: off)\n"
      "  --check                 also validate trace.json; exit 1 on violations or errors "
      "(default: off)\n"
      "  --compare OTHER_RUN     alias of `lantern compare RUN_DIR OTHER_RUN` (default: none)\n\n"
      "example:\n  lantern inspect runs/mixed --phase decode --top 10\n";
  h["commbench"] =
      "usage: lantern commbench [--tp N] [--device cpu|cuda] [--gpu G] [--sizes B,B,...] [--iters K] "
      "[--out FILE.json]\n"
      "all_reduce (sum, in place) over N processes started by the --tp launcher, as nccl-tests'\n"
      "all_reduce_perf measures it: median time per message size, algbw = bytes / time, busbw =\n"
      "2(N-1)/N x algbw. cuda: NCCL on GPUs G..G+N-1 (bf16), and for messages up to 4 MiB also the\n"
      "one-shot P2P kernel (the path decode steps take; --tp-allreduce or LANTERN_TP_ALLREDUCE picks it\n"
      "for engines), each path with one table; 'in graph us' is one call of K captured back to back\n"
      "in a CUDA graph (how a decode step runs it). cpu: the host communicator (f32).\n\n"
      "options:\n"
      "  --tp N                  ranks (default 2)\n"
      "  --device cpu|cuda       backend (default: cuda when a GPU is usable, else cpu)\n"
      "  --gpu G                 first GPU (default 0)\n"
      "  --sizes B,...           message sizes in bytes (default 8192 .. 268435456, x4)\n"
      "  --iters K               timed calls per size after 3 warm-ups (default 20)\n"
      "  --out FILE.json         also write the rows as JSON (default: none)\n\n"
      "example:\n  lantern commbench --tp 2 --device cuda --out runs/allreduce.json\n";
  h["synth"] =
      "usage: lantern synth --preset NAME --out DIR [--seed N] [--tokenizer-dir DIR] [--threads "
      "N]\n"
      "Writes a complete HF model directory with seeded random bf16 weights of a preset's exact "
      "shapes.\n\n"
      "options:\n"
      "  --preset NAME           tiny, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b (required)\n"
      "  --out DIR               model directory to write (required)\n"
      "  --seed N                weight seed (default 0)\n"
      "  --tokenizer-dir DIR     folder with tokenizer.json (default: third_party/npm/llama3)\n"
      "  --threads N             writer threads (default 0: one per hardware thread)\n\n"
      "example:\n  lantern synth --preset llama-3.2-1b --out models/llama-3.2-1b --seed 0\n";
  h["tokenize"] =
      "usage: lantern tokenize --model DIR [TEXT | --file FILE | --jsonl FILE] [--no-special]\n"
      "Text to token ids (a JSON array per input) with the model's tokenizer.json.\n\n"
      "options:\n"
      "  --model DIR             folder with tokenizer.json (required)\n"
      "  --file FILE             tokenize the whole file (default: TEXT or stdin)\n"
      "  --jsonl FILE            one JSON string a line, one id array a line out (default: none)\n"
      "  --no-special            treat special-token text as plain text (default: parse it)\n\n"
      "example:\n  lantern tokenize --model models/tiny-seed0 \"Hello world\"\n";
  h["detokenize"] =
      "usage: lantern detokenize --model DIR [--skip-special] < ids.json\n"
      "Token ids (a JSON array on stdin) to text.\n\n"
      "options:\n"
      "  --model DIR             folder with tokenizer.json (required)\n"
      "  --skip-special          drop special tokens (default: keep them)\n\n"
      "example:\n  echo '[9906,1917]' | lantern detokenize --model models/tiny-seed0\n";
  h["help"] =
      "usage: lantern help [COMMAND | schema]\n"
      "Lists the commands, or prints one command's usage, options with defaults and an example\n"
      "(the same as `lantern COMMAND --help`); `schema`: every experiment field as a Markdown "
      "table.\n\n"
      "options:\n  (none)\n\n"
      "example:\n  lantern help run\n";
  return h;
}

int cmd_help(const std::vector<std::string>& argv) {
  if (!argv.empty() && argv[0] == "schema") {
    std::fputs(experiment::schema_markdown().c_str(), stdout);
    return 0;
  }
  if (argv.empty()) {
    std::printf(
        "usage: lantern <command> [options]   (lantern help COMMAND for one "
        "command)\n\ncommands:\n");
    for (const auto& [name, c] : commands())
      std::printf("  %-12s %s\n", name.c_str(), c.summary.c_str());
    return 0;
  }
  if (!commands().count(argv[0])) {
    std::fprintf(stderr, "lantern help: unknown command '%s' (fix: `lantern help` lists them)\n",
                 argv[0].c_str());
    return 1;
  }
  std::fputs(help_text(argv[0]).c_str(), stdout);
  return 0;
}

}  // namespace

std::string help_text(const std::string& command) {
  static const std::map<std::string, std::string> texts = build();
  auto it = texts.find(command);
  if (it != texts.end()) return it->second;
  auto c = commands().find(command);
  return "usage: lantern " + command + " [options]\n" +
         (c != commands().end() ? c->second.summary + "\n" : "");
}

LANTERN_COMMAND("help", "usage, options and an example of a command", cmd_help);

}  // namespace lantern::cli
