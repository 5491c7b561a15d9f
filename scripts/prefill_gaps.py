#!/usr/bin/env python3
"""Where a prefill step's wall time goes, from a recorded run's trace.json.

Usage: prefill_gaps.py [--dump-layer N] RUN_DIR [RUN_DIR ...]

For every step whose phase is prefill: the host step range, the host time
inside op ranges and outside them (engine work), the CUDA API calls made in
the step (count and time by name: launches, copies, syncs, cuBLAS's own
calls), and the GPU side: kernels, their summed time, the span from the first
kernel's start to the last one's end, and the idle time inside that span
(gaps). When the GPU's idle gaps add up to about the host launch time, the
step is launch-bound: the GPU waits for the host. Then, per op, the kernels'
summed duration (cuBLAS's kernels apart from Lantern's) and their *wall share*: each kernel's end minus the later of
its start and the latest end before it. With programmatic dependent launch a
kernel starts while its predecessor drains, so CUPTI durations overlap and
their sum overstates an op's cost; the wall shares add up to the busy span and
say what removing the op's work could save. --dump-layer N lists the last
prefill step's GPU events (kernels, memsets, copies) from layer N's first
kernel to layer N + 1's: start, duration, the gap before each, name, grid,
block, dynamic shared memory. stdlib only (runs on the device
machine).
"""
import collections
import json
import sys


def load(run):
    with open(f"{run}/trace.json") as f:
        return json.load(f)["traceEvents"]


def steps_of(events):
    steps = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "phase" and e.get("name") == "prefill":
            steps[e["args"]["step"]] = {"phase": e}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "step" and e["args"].get("step") in steps:
            steps[e["args"]["step"]]["step"] = e
    return steps


def report(run):
    ev = load(run)
    steps = steps_of(ev)
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "op"]
    api = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cuda_api"]
    kern = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    replays = [e for e in ev if e.get("cat") == "graph"]
    print(f"== {run}")
    for n, s in sorted(steps.items()):
        st = s.get("step", s["phase"])
        t0, t1 = st["ts"], st["ts"] + st["dur"]
        tokens = s["phase"]["args"].get("tokens")
        sops = [o for o in ops if o["args"].get("step") == n]
        op_host = sum(o["dur"] for o in sops)
        sapi = [a for a in api if t0 <= a["ts"] <= t1]
        by = collections.defaultdict(lambda: [0, 0.0])
        for a in sapi:
            by[a["name"]][0] += 1
            by[a["name"]][1] += a["dur"]
        sk = sorted((k for k in kern if k["args"].get("step") == n), key=lambda k: k["ts"])
        ksum = sum(k["dur"] for k in sk)
        span = (sk[-1]["ts"] + sk[-1]["dur"] - sk[0]["ts"]) if sk else 0
        nrep = sum(1 for r in replays if r.get("args", {}).get("step") == n)
        print(f"step {n}: tokens {tokens}, host step {st['dur']:.1f} us, {len(sops)} op ranges "
              f"({op_host:.1f} us inside ops, {st['dur'] - op_host:.1f} us outside), graph replays {nrep}")
        print(f"  GPU: {len(sk)} kernels, busy {ksum:.1f} us, span {span:.1f} us, idle in span "
              f"{span - ksum:.1f} us; step start -> first kernel "
              f"{(sk[0]['ts'] - t0) if sk else 0:.1f} us, last kernel end -> step end "
              f"{(t1 - sk[-1]['ts'] - sk[-1]['dur']) if sk else 0:.1f} us")
        for name, (c, d) in sorted(by.items(), key=lambda x: -x[1][1])[:12]:
            print(f"  api {name:40s} x{c:4d} {d:9.1f} us ({d / max(c, 1):.2f} us each)")
        # Per-op host cost: the op range minus the API calls inside it (cuBLAS's
        # own host work, argument building, observer hooks).
        per = collections.defaultdict(lambda: [0, 0.0])
        for o in sops:
            per[o["name"]][0] += 1
            per[o["name"]][1] += o["dur"]
        line = ", ".join(f"{k} {v[1] / v[0]:.1f}" for k, v in sorted(per.items(), key=lambda x: -x[1][1])[:10])
        print(f"  host us per op call: {line}")
        wall_share(sk)
        gaps(sk)
        if DUMP_LAYER is not None and n == max(steps):
            dump_layer(ev, sk, DUMP_LAYER)


def wall_share(sk):
    """Per op: kernels, summed CUPTI duration, summed wall share (see the module doc)."""
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])
    latest = None
    for k in sk:  # sorted by start
        end = k["ts"] + k["dur"]
        share = end - (k["ts"] if latest is None else max(k["ts"], latest))
        latest = end if latest is None else max(latest, end)
        op = k["args"].get("op", k["name"])
        p = per[op + " (cuBLAS)" if kind(k) == "cublas" else op]
        p[0] += 1
        p[1] += k["dur"]
        p[2] += max(share, 0.0)
    total = sum(v[2] for v in per.values())
    print(f"  {'op':28s} {'kernels':>7s} {'CUPTI us':>9s} {'wall us':>8s} {'wall %':>6s}")
    for name, (c, d, w) in sorted(per.items(), key=lambda x: -x[1][2]):
        print(f"  {name:28s} {c:7d} {d:9.1f} {w:8.1f} {100 * w / max(total, 1e-9):6.1f}")


def kind(k):
    n = k["name"]
    return "cublas" if n.startswith(("nvjet", "sm90_xmma", "cutlass", "ampere_", "sm80_")) else "ours"


def gaps(sk):
    """The GPU's idle time inside the step, by the pair of ops around each gap (prev -> next) and
    by the kinds of kernels around it (ours: Lantern's kernels; cublas: cuBLAS(Lt)'s)."""
    by_pair = collections.defaultdict(lambda: [0, 0.0])
    by_kind = collections.defaultdict(lambda: [0, 0.0])
    latest, prev = None, None
    for k in sk:
        if latest is not None and k["ts"] > latest:
            g = k["ts"] - latest
            a = by_pair[(prev["args"].get("op", "?"), k["args"].get("op", "?"))]
            a[0] += 1
            a[1] += g
            b = by_kind[(kind(prev), kind(k))]
            b[0] += 1
            b[1] += g
        end = k["ts"] + k["dur"]
        if latest is None or end >= latest:
            latest, prev = end, k
    print("  idle gaps by kernel kinds (prev -> next): " + ", ".join(
        f"{a} -> {b} {v[1]:.1f} us in {v[0]}" for (a, b), v in sorted(by_kind.items(), key=lambda x: -x[1][1])))
    print("  idle gaps by ops (prev -> next), the largest:")
    for (a, b), v in sorted(by_pair.items(), key=lambda x: -x[1][1])[:12]:
        print(f"    {a:26s} -> {b:26s} {v[1]:7.1f} us in {v[0]:3d} ({v[1] / v[0]:.2f} each)")


def dump_layer(ev, sk, layer):
    """Every GPU event (kernel, memset, memcpy) between layer `layer`'s first kernel and the next
    layer's, in start order."""
    mine = [k for k in sk if k["args"].get("layer") == layer]
    after = [k for k in sk if k["args"].get("layer") == layer + 1]
    if not mine:
        print(f"  layer {layer}: no kernels")
        return
    t0 = mine[0]["ts"]
    t1 = after[0]["ts"] + after[0]["dur"] if after else mine[-1]["ts"] + mine[-1]["dur"]
    gpu = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "memset", "memcpy")
                  and t0 <= e["ts"] <= t1), key=lambda e: e["ts"])
    print(f"  layer {layer} (and the next layer's first event): t, dur, gap before (us), kind, op, name, grid, block, smem")
    end = None
    for e in gpu:
        a = e.get("args", {})
        gap = "" if end is None else f"{e['ts'] - end:6.2f}"
        print(f"    {e['ts'] - t0:8.2f} {e['dur']:7.2f} {gap:>6s} {e['cat']:6s} {a.get('op', '-'):24s} "
              f"{e['name'][:60]:60s} {a.get('grid', '')} {a.get('block', '')} {a.get('dynamic_smem_bytes', '')}")
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])


DUMP_LAYER = None

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump-layer"]:
        DUMP_LAYER, args = int(args[1]), args[2:]
    for r in args:
        try:
            report(r)
        except Exception as e:  # keep going: one bad run must not hide the others
            print(f"{r}: {e}")
