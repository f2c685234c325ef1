#!/usr/bin/env bash
# Install vllm-router (the vLLM project's Rust router, from the package index) in its own
# virtual environment, for benchmarks/router_check.py.
#
#   bash benchmarks/vllm_cpu/install_router.sh [VENV_DIR]      (default: /work/vllm-router-venv)
set -euo pipefail
VENV=${1:-/work/vllm-router-venv}
if [ ! -x "$VENV/bin/vllm-router" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "vllm-router==0.1.17"
fi
echo "vllm-router $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-router"))') in $VENV"
