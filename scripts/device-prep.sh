#!/usr/bin/env bash
# Prepare .device/ (git-ignored) with what the H200 machine lacks, to be named
# in the device tool's `carry`: Debian's PCRE2 headers and libraries (same
# 10.42 release as Ubuntu 24.04's runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device/debs .device/pcre2
if [[ ! -f .device/pcre2/usr/include/pcre2.h ]]; then
  (cd .device/debs && apt-get download libpcre2-dev libpcre2-8-0 >/dev/null)
  for f in .device/debs/*.deb; do dpkg -x "$f" .device/pcre2; done
fi
# The real Llama 3 tokenizer files (setup.sh puts them in third_party/, which git ignores).
mkdir -p .device/llama3
cp -u third_party/npm/llama3/tokenizer.json third_party/npm/llama3/tokenizer_config.json .device/llama3/
# Debian's Google Benchmark runtime (bench_kernels built here links libbenchmark.so.1debian).
mkdir -p .device/libs
cp -uL /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .device/libs/ 2>/dev/null || true
echo "device-prep: ok"
