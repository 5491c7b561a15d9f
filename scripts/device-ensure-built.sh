#!/usr/bin/env bash
# On the H200 machine, from the repo root: when no binaries were carried
# (no build/default/bin/lantern, or a link to an earlier call's build), builds TARGETS there from this tree
# (scripts/device-build.sh, ~1 minute) and links build/default/{bin,tests,bench}
# to them; links the carried tokenizer (.device/llama3) where `lantern run`
# looks for it. Build log: LOG (default /tmp/lantern-build.log).
#   bash scripts/device-ensure-built.sh lantern lantern_gpu_tests bench_kernels
set -u
cd "$(dirname "$0")/.."
LOG=${LOG:-/tmp/lantern-build.log}
# Carried binaries are a real build/default/bin; a link to gpu-machine (an earlier call's build
# kept on the machine) is brought up to date with this tree (ninja: a no-op when nothing changed).
if [[ ! -x build/default/bin/lantern || -L build/default/bin ]]; then
  t0=$(date +%s)
  bash scripts/device-build.sh "$@" > "$LOG" 2>&1 || { tail -30 "$LOG"; exit 1; }
  echo "build: rc=0 $(( $(date +%s) - t0 ))s (on this machine, from this tree)"
  mkdir -p build/default
  for d in bin tests bench; do ln -sfn ../gpu-machine/$d build/default/$d; done
fi
if [[ ! -e third_party/npm/llama3 && -d .device/llama3 ]]; then
  mkdir -p third_party/npm && ln -sfn "$PWD/.device/llama3" third_party/npm/llama3
fi
exit 0
