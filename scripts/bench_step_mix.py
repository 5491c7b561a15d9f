#!/usr/bin/env python3
"""Which steps `lantern bench` took its decode median over before session 9 (a model of the scheduler).

The scheduler (engine/scheduler.cpp) fills a step with the running sequences' decode rows first, then
continuing prompt chunks, then new prompts, up to --max-batch-tokens rows. Before session 9 the bench
counted the first ceil(batch * prompt / max_batch_tokens) steps as prefill and every later step as a
decode step of the batch. This replays that policy and counts, among those "decode" steps, the mixed
steps (prompt rows too), the steps that decode the whole batch, and the partial (ramp-down) steps.

  python3 scripts/bench_step_mix.py [--max-batch-tokens 512] B:P:S [B:P:S ...]
"""
import argparse
import math


def simulate(batch, prompt, steps, max_rows):
    done_prompt = [0] * batch  # prompt tokens processed
    generated = [0] * batch
    admitted = [False] * batch
    kinds = []  # per step: (decode rows, prompt rows)
    while not all(a and g >= steps for a, g in zip(admitted, generated)):
        budget, decode, prompt_rows = max_rows, 0, 0
        for s in range(batch):  # 1. decodes
            if admitted[s] and generated[s] < steps and done_prompt[s] == prompt and budget > 0:
                decode += 1
                budget -= 1
                generated[s] += 1
        for s in range(batch):  # 2. continuing chunks, 3. admissions (a prompt's last chunk yields a token)
            if budget <= 0:
                break
            if admitted[s] and 0 < done_prompt[s] < prompt or not admitted[s]:
                admitted[s] = True
                c = min(prompt - done_prompt[s], budget)
                done_prompt[s] += c
                budget -= c
                prompt_rows += c
                generated[s] += done_prompt[s] == prompt
        kinds.append((decode, prompt_rows))
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("points", nargs="+", help="batch:prompt:decode_steps")
    ap.add_argument("--max-batch-tokens", type=int, default=512)
    args = ap.parse_args()
    print("batch prompt steps | all steps | old 'decode' steps: mixed whole partial | whole-batch steps in the run")
    for point in args.points:
        b, p, s = map(int, point.split(":"))
        kinds = simulate(b, p, s, max(args.max_batch_tokens, b, p))
        old = kinds[math.ceil(b * p / max(args.max_batch_tokens, b, p)):]
        mixed = sum(pr > 0 for d, pr in old)
        whole = sum(pr == 0 and d == b for d, pr in old)
        print(f"{b:5d} {p:6d} {s:5d} | {len(kinds):9d} | {len(old):5d} = {mixed:5d} {whole:5d} {len(old) - mixed - whole:7d} |"
              f" {sum(pr == 0 and d == b for d, pr in kinds):5d}")


if __name__ == "__main__":
    main()
