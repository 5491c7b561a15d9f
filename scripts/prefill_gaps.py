#!/usr/bin/env python3
"""Where a prefill step's wall time goes, from a recorded run's trace.json.

Usage: prefill_gaps.py RUN_DIR [RUN_DIR ...]

For every step whose phase is prefill: the host step range, the host time
inside op ranges and outside them (engine work), the CUDA API calls made in
the step (count and time by name: launches, copies, syncs, cuBLAS's own
calls), and the GPU side: kernels, their summed time, the span from the first
kernel's start to the last one's end, and the idle time inside that span
(gaps). When the GPU's idle gaps add up to about the host launch time, the
step is launch-bound: the GPU waits for the host. stdlib only (runs on the
device machine).
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


if __name__ == "__main__":
    for r in sys.argv[1:]:
        try:
            report(r)
        except Exception as e:  # keep going: one bad run must not hide the others
            print(f"{r}: {e}")
