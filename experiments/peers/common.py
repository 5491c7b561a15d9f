"""Shared by the peers: the job files Lantern writes, the serving schedule,
the serving metrics (the same keys and the same percentile rule as
harness/experiment/serving.cpp) and the run directory in Lantern's format
(manifest.json, metrics.json, outputs.jsonl; docs/experiments.md § Peers).

A job is what `lantern run EXP --dry-run --resolved-out R --workload-out W`
wrote: R the resolved experiment (defaults and --set applied), W one request
a line (prompt_ids, max_new_tokens, arrival_s, ...), so a peer runs exactly
Lantern's requests.
"""
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import time


def load_job(resolved_path, workload_path):
    with open(resolved_path) as f:
        resolved = json.load(f)
    with open(workload_path) as f:
        items = [json.loads(line) for line in f if line.strip()]
    if not items:
        raise SystemExit(f"{workload_path}: no requests (fix: write it with lantern run --workload-out)")
    return resolved, items


def percentile(values, p):
    """Linear interpolation between order statistics (numpy's default)."""
    if not values:
        return 0.0
    v = sorted(values)
    rank = min(max(p, 0.0), 100.0) / 100.0 * (len(v) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def latency_summary(values):
    return {"mean": sum(values) / len(values) if values else 0.0, "p50": percentile(values, 50),
            "p90": percentile(values, 90), "p99": percentile(values, 99), "max": max(values) if values else 0.0}


def serving_metrics(timings):
    """timings: dicts with submit_s, admit_s, finish_s, token_s (list), prompt_tokens."""
    ttft, tpot, itl, e2e, wait = [], [], [], [], []
    prompt_tokens = sum(t["prompt_tokens"] for t in timings)
    output_tokens = sum(len(t["token_s"]) for t in timings)
    start = min(t["submit_s"] for t in timings)
    end = max(t["finish_s"] for t in timings)
    for t in timings:
        e2e.append((t["finish_s"] - t["submit_s"]) * 1e3)
        wait.append((t["admit_s"] - t["submit_s"]) * 1e3)
        tok = t["token_s"]
        if not tok:
            continue
        ttft.append((tok[0] - t["submit_s"]) * 1e3)
        if len(tok) >= 2:
            tpot.append((tok[-1] - tok[0]) * 1e3 / (len(tok) - 1))
        itl.extend((b - a) * 1e3 for a, b in zip(tok, tok[1:]))
    duration = max(0.0, end - start)
    per_s = (lambda n: n / duration if duration > 0 else 0.0)
    return {"requests": len(timings), "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
            "duration_s": duration, "request_throughput": per_s(len(timings)),
            "output_throughput": per_s(output_tokens), "total_token_throughput": per_s(prompt_tokens + output_tokens),
            "ttft_ms": latency_summary(ttft), "tpot_ms": latency_summary(tpot), "itl_ms": latency_summary(itl),
            "e2e_ms": latency_summary(e2e), "admission_wait_ms": latency_summary(wait),
            "admission_wait_per_request_ms": wait}


def _leaves(j, prefix, out):
    if isinstance(j, bool):
        return
    if isinstance(j, (int, float)):
        out[prefix] = float(j)
    elif isinstance(j, dict):
        for k, v in j.items():
            _leaves(v, f"{prefix}.{k}" if prefix else k, out)


def summarize_repetitions(reps):
    values = {}
    for r in reps:
        flat = {}
        _leaves(r, "", flat)
        for k, v in flat.items():
            values.setdefault(k, []).append(v)
    out = {}
    for k, v in values.items():
        if len(v) != len(reps):
            continue
        med = percentile(v, 50)
        out[k] = {"median": med, "min": min(v), "max": max(v),
                  "spread": (max(v) - min(v)) / abs(med) if med else 0.0}
    return out


def run_schedule(items, max_batch, run_batch, can_join=lambda first, other: True):
    """Static batching in arrival order: a batch is every arrived request (up
    to max_batch, and those can_join the first) when the previous batch is
    done. run_batch(batch) returns, per request, the perf_counter times of its
    generated tokens. Returns (timings in workload order, token lists)."""
    t0 = time.perf_counter()
    pending = list(range(len(items)))
    timings = [None] * len(items)
    tokens = [None] * len(items)
    while pending:
        now = time.perf_counter() - t0
        first = pending[0]
        if items[first]["arrival_s"] > now:
            time.sleep(items[first]["arrival_s"] - now)
            continue
        batch = [first]
        for i in pending[1:]:
            if len(batch) >= max_batch or items[i]["arrival_s"] > now:
                break
            if can_join(items[first], items[i]):
                batch.append(i)
        admit = time.perf_counter() - t0
        token_times, token_ids = run_batch([items[i] for i in batch])
        for k, i in enumerate(batch):
            ts = [t - t0 for t in token_times[k]]
            timings[i] = {"submit_s": items[i]["arrival_s"], "admit_s": admit, "token_s": ts,
                          "finish_s": ts[-1] if ts else admit, "prompt_tokens": len(items[i]["prompt_ids"])}
            tokens[i] = token_ids[k]
        pending = [i for i in pending if i not in batch]
    return timings, tokens


def run_job(resolved, items, run_batch, can_join=lambda a, b: True, progress=""):
    """Warm-ups and repetitions of one job; returns (repetition metrics, last tokens)."""
    max_batch = resolved["limits"]["max_seqs"]
    reps = []
    tokens = None
    for r in range(resolved.get("warmup", 0) + resolved.get("repetitions", 1)):
        timings, tokens = run_schedule(items, max_batch, run_batch, can_join)
        if r >= resolved.get("warmup", 0):
            reps.append(serving_metrics(timings))
            print(f"{progress} rep {len(reps)}: {reps[-1]['output_throughput']:.1f} output tokens/s, "
                  f"TPOT p50 {reps[-1]['tpot_ms']['p50']:.3f} ms, TTFT p50 {reps[-1]['ttft_ms']['p50']:.2f} ms",
                  flush=True)
    return reps, tokens


def versions():
    v = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "safetensors"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing module is recorded as such
            v[mod] = None
    try:
        import torch
        v["cuda"] = torch.version.cuda
        v["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        pass
    return v


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return None


def write_run(out_dir, peer, description, resolved, reps, items, tokens, model_dir, notes=()):
    """A run directory `lantern compare` reads: manifest.json (last), metrics.json, outputs.jsonl."""
    os.makedirs(out_dir, exist_ok=True)
    ver = versions()
    with open(os.path.join(out_dir, "outputs.jsonl"), "w") as f:
        for i, (it, tok) in enumerate(zip(items, tokens)):
            f.write(json.dumps({"id": i, "tag": it.get("tag", ""), "prompt": it["prompt_ids"], "tokens": tok}) + "\n")
    metrics = {"format_version": "1.0", "repetitions": reps, "summary": summarize_repetitions(reps),
               "warmup": resolved.get("warmup", 0)}
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    manifest = {"format": "lantern-run", "format_version": "1.0", "name": f"{peer}",
                "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "complete": True, "backend": "cuda", "peer": {"name": peer, "description": description,
                                                              "versions": ver, "notes": list(notes)},
                "git": {"commit": git_commit()}, "gpu": {"name": ver.get("gpu")},
                "host": {"hostname": socket.gethostname()},
                "experiment": {"resolved": resolved, "effective": {"device": "cuda", "model_dir": model_dir,
                                                                   "preset": ""}}}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return out_dir


def median_of(reps, key):
    return statistics.median(r[key] for r in reps)
