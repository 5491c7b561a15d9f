#!/usr/bin/env python3
"""Lantern and every peer on the same experiments, one table.

For each experiment (and each point of its "sweep" section): `lantern run`
records Lantern's run, `lantern run --dry-run` writes the resolved
experiment and the exact workload, each peer (run_peer.py) runs that
workload into a run directory of Lantern's format, and `lantern compare
--markdown` prints them side by side; a summary table of the headline
numbers comes last.

  python3 experiments/peers/run_experiments.py --lantern build/gpu-machine/bin/lantern \
      --model models/llama-3.2-1b --out runs/peers \
      --experiments decode-latency prefill-sweep throughput-256 \
      [--peers hf-eager hf-compile lantern-torch] [--set repetitions=3 ...]
"""
import argparse
import itertools
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def sh(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def points_of(exp_file):
    """[(label, [--set args])] for the file's sweep grid (one point without one)."""
    with open(exp_file) as f:
        sweep = json.load(f).get("sweep", {})
    if not sweep:
        return [("", [])]
    keys = list(sweep)
    out = []
    for values in itertools.product(*(sweep[k] for k in keys)):
        label = ",".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, values))
        sets = ["--set", "sweep={}"]
        for k, v in zip(keys, values):
            sets += ["--set", f"{k}={json.dumps(v)}"]
        out.append((label, sets))
    return out


def headline(run_dir):
    with open(os.path.join(run_dir, "metrics.json")) as f:
        s = json.load(f).get("summary", {})
    med = (lambda k: s.get(k, {}).get("median", float("nan")))
    return med("output_throughput"), med("tpot_ms.p50"), med("ttft_ms.p50")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lantern", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--experiments", nargs="+", default=["decode-latency", "prefill-sweep", "throughput-256"])
    ap.add_argument("--peers", nargs="*", default=["hf-eager", "hf-compile", "lantern-torch"])
    ap.add_argument("--set", action="append", default=[], help="passed to lantern run for every job")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    common_sets = ["--set", f"model.path={a.model}"]
    for s in a.set:
        common_sets += ["--set", s]
    jobs = {p: [] for p in a.peers}
    rows = []  # (experiment, point, lantern dir)
    for name in a.experiments:
        exp = os.path.join(ROOT, "experiments", name + ".json")
        for label, point_sets in points_of(exp):
            tag = name + (f"-{label}" if label else "")
            tag = tag.replace("=", "").replace(",", "-")
            base = os.path.join(a.out, tag)
            sets = common_sets + point_sets
            lantern_dir = os.path.join(base, "lantern")
            sh([a.lantern, "run", exp, "--quiet", "--out", lantern_dir] + sets)
            resolved, workload = os.path.join(base, "resolved.json"), os.path.join(base, "workload.jsonl")
            sh([a.lantern, "run", exp, "--dry-run", "--quiet", "--resolved-out", resolved,
                "--workload-out", workload] + sets)
            for p in a.peers:
                jobs[p].append((resolved, workload, os.path.join(base, p)))
            rows.append((name, label, base))
    failed = []
    for p, js in jobs.items():
        cmd = [sys.executable, os.path.join(HERE, "run_peer.py"), "--peer", p, "--model", a.model]
        for r, w, o in js:
            cmd += ["--job", r, w, o]
        try:
            sh(cmd)
        except subprocess.CalledProcessError as e:  # one broken peer must not hide the others
            failed.append(f"{p} (exit {e.returncode})")
    print("\n## Lantern and peers, side by side\n")
    for name, label, base in rows:
        dirs = [os.path.join(base, "lantern")] + [os.path.join(base, p) for p in a.peers
                                                  if os.path.exists(os.path.join(base, p, "manifest.json"))]
        print(f"### {name} {label}\n", flush=True)
        sh([a.lantern, "compare"] + dirs + ["--markdown", "--no-kernels"])
        print()
    print("### Summary (median over repetitions)\n")
    print("| experiment | system | output tok/s | TPOT p50 ms | TTFT p50 ms |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, label, base in rows:
        for system in ["lantern"] + a.peers:
            d = os.path.join(base, system)
            if not os.path.exists(os.path.join(d, "metrics.json")):
                continue
            tput, tpot, ttft = headline(d)
            print(f"| {name} {label} | {system} | {tput:.1f} | {tpot:.3f} | {ttft:.2f} |")
    if failed:
        print("\nFAILED peers: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
