#!/usr/bin/env python3
"""A model of the throughput-256 run under the scheduler's policy (docs/engine.md, "Batching"),
for weighing a scheduling change before building it (docs/performance.md, session 25).

Requests all arrive at once; each step takes the decoding sequences first, then prompt rows (the
next chunks of admitted prompts, then new admissions in order) up to the step's token budget and
max_seqs. A sequence decodes from the step after its last prompt chunk, one token per step, until
it has `--out` tokens. Step time (ms) = decode(d) + p * row_ms in the additive model, or
max(decode(d), (p + d) * row_ms) in the overlapped one (prompt rows filling the FLOPs a
weight-bound decode step leaves idle), where d is the step's decode rows, p its prompt rows,
decode(d) interpolates the measured decode-step table (--decode-ms) and row_ms is one token's
forward FLOPs at --tflops. --prompt-cap N caps a step's prompt rows while sequences decode (0:
the token budget only, as the engine does now).

  python3 scripts/sched_sim.py [--budget 4096] [--sweep 512,1024,2048,4096,8192]
        [--prompt-cap 0] [--tflops 650] [--decode-ms 1:0.89,16:1.15,64:1.24,128:1.46,256:1.99]
"""
import argparse
import bisect
import statistics


def parse_table(text):
    pts = sorted((int(b), float(t)) for b, t in (kv.split(":") for kv in text.split(",")))
    return [b for b, _ in pts], [t for _, t in pts]


def decode_ms(table, d):
    bs, ts = table
    if d <= 0:
        return 0.0
    if d <= bs[0]:
        return ts[0]
    if d >= bs[-1]:
        return ts[-1] * d / bs[-1]  # beyond the table: grows with the rows (KV reads)
    i = bisect.bisect_left(bs, d)
    b0, b1, t0, t1 = bs[i - 1], bs[i], ts[i - 1], ts[i]
    return t0 + (t1 - t0) * (d - b0) / (b1 - b0)


def simulate(n, prompt, out, budget, max_seqs, cap, row_ms, table, overlapped):
    left = [prompt] * n      # prompt rows still to prefill
    made = [0] * n           # tokens generated
    first = [None] * n       # time of the first token
    done = [None] * n
    t = 0.0
    next_admit = 0
    active = []              # admitted, not finished
    while any(d is None for d in done):
        decoding = [i for i in active if left[i] == 0]
        rows = len(decoding)
        p = 0
        room = budget - rows
        if cap and decoding:
            room = min(room, cap)
        chunks = []
        for i in active:  # next chunks of admitted prompts
            if left[i] > 0 and room > 0:
                take = min(left[i], room)
                chunks.append((i, take))
                room -= take
        while room > 0 and next_admit < n and len(active) < max_seqs:
            i = next_admit
            next_admit += 1
            active.append(i)
            take = min(left[i], room)
            chunks.append((i, take))
            room -= take
        p = sum(c for _, c in chunks)
        dec = decode_ms(table, rows)
        step = max(dec, (p + rows) * row_ms) if overlapped else dec + p * row_ms
        t += step
        for i in decoding:
            made[i] += 1
            if first[i] is None:
                first[i] = t
            if made[i] == out:
                done[i] = t
        for i, c in chunks:
            left[i] -= c
            if left[i] == 0:  # the last chunk's step also yields the first token
                made[i] += 1
                first[i] = t
                if made[i] == out:
                    done[i] = t
        active = [i for i in active if done[i] is None]
    total = max(done)
    tpot = [(done[i] - first[i]) / max(1, out - 1) for i in range(n)]
    return total, n * out / total * 1e3, statistics.median(first), statistics.median(tpot)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--out", type=int, default=128)
    ap.add_argument("--budget", type=int, default=4096, help="max_batch_tokens")
    ap.add_argument("--sweep", default="", help="budgets to compare, comma separated")
    ap.add_argument("--max-seqs", type=int, default=256)
    ap.add_argument("--prompt-cap", type=int, default=0)
    ap.add_argument("--tflops", type=float, default=650.0, help="prefill GEMM throughput")
    ap.add_argument("--params", type=float, default=1.236e9, help="parameters (FLOPs per token = 2x)")
    ap.add_argument("--decode-ms", default="1:0.89,16:1.15,32:1.15,64:1.24,128:1.46,256:1.99",
                    help="measured decode step (ms) by batch (session 25's verification call)")
    a = ap.parse_args()
    table = parse_table(a.decode_ms)
    row_ms = 2 * a.params / (a.tflops * 1e12) * 1e3
    budgets = [int(x) for x in a.sweep.split(",")] if a.sweep else [a.budget]
    print(f"{a.requests} requests x {a.prompt} in / {a.out} out; prompt row {row_ms * 1e3:.2f} us at {a.tflops:g} "
          f"TFLOP/s; decode steps {a.decode_ms}; prompt cap {a.prompt_cap or 'none'}")
    print(f"{'budget':>7} | {'model':<10} {'total ms':>9} {'tok/s':>9} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12}")
    for b in budgets:
        for name, ov in (("additive", False), ("overlapped", True)):
            total, tps, ttft, tpot = simulate(a.requests, a.prompt, a.out, b, a.max_seqs, a.prompt_cap, row_ms,
                                              table, ov)
            print(f"{b:>7} | {name:<10} {total:9.1f} {tps:9.0f} {ttft:12.1f} {tpot:12.2f}")


if __name__ == "__main__":
    main()
