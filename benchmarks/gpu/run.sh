#!/usr/bin/env bash
# The engine on a CUDA GPU: its tests, its speed beside the roofline, a calibration and two
# validations. Run from the repository root on a machine with one GPU:
#   OUT=benchmarks/results/<gpu> bash benchmarks/gpu/run.sh setup tests bench calibrate validate
# Stages may be given one at a time (each writes its logs and files into $OUT). `setup` installs
# the project's pure-Python dependencies from wheels in out/gpuwheels (for a machine without a
# package index; see ../shared/gpu/README.md) into $DEPS, then every stage runs with them first.
# Optional: TESTS (test paths, default tests/kernels tests/engine), POLICIES (default continuous
# chunked-prefill), RATE (an arrival rate instead of the scenario's; LABEL names the results,
# e.g. -light), GPU (the catalog's name of the card, default H100-SXM), REPEATS (measured runs per
# validation, default 2), PROFILE (an existing profile
# to validate with instead of the calibrate stage's).
set -uo pipefail
OUT=${OUT:?set OUT to the results folder}
DEPS=${DEPS:-/tmp/servesim-deps}
MODEL=${MODEL:-llama-3-8b}
NREQ=${NREQ:-300}
TESTS=${TESTS:-tests/kernels tests/engine}
POLICIES=${POLICIES:-continuous chunked-prefill}
RATE=${RATE:-}
LABEL=${LABEL:-}
REPEATS=${REPEATS:-2}
PROFILE=${PROFILE:-$OUT/profile-$MODEL.json}
GPU=${GPU:-H100-SXM}  # the catalog's name of the GPU at hand, for the validated scenario
mkdir -p "$OUT"
export PYTHONPATH="$DEPS:$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
servesim() { "$PY" -m sim.cli.app "$@"; }

for stage in "$@"; do
  start=$(date +%s)
  case "$stage" in
    setup)
      "$PY" -m pip install -q --no-index --no-deps --target "$DEPS" out/gpuwheels/*.whl 2>&1 | tail -2
      { nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.memory,driver_version --format=csv
        "$PY" -c 'import torch, triton, numba, numpy; print("torch", torch.__version__, "triton", triton.__version__, "numba", numba.__version__, "numpy", numpy.__version__)'
        git rev-parse HEAD 2>/dev/null || true; } > "$OUT/env.log" 2>&1
      cat "$OUT/env.log" ;;
    tests)
      TRITON_INTERPRET=0 "$PY" -m pytest -q -p no:cacheprovider $TESTS > "$OUT/gpu-tests.log" 2>&1
      tail -15 "$OUT/gpu-tests.log" ;;
    bench)
      "$PY" -m engine.bench --device cuda --model "$MODEL" --out "$OUT/engine-bench.json" > "$OUT/engine-bench.log" 2>&1
      tail -30 "$OUT/engine-bench.log"
      "$PY" -m kernels.bench_decode_attention --batch 1 8 32 128 256 --context 1024 4096 8192 \
        > "$OUT/decode-attention.log" 2>&1; tail -20 "$OUT/decode-attention.log" ;;
    calibrate)
      servesim calibrate --model "$MODEL" --device cuda --no-progress --out "$PROFILE" \
        > "$OUT/calibrate.log" 2>&1; tail -25 "$OUT/calibrate.log" ;;
    validate)
      for policy in $POLICIES; do
        name="validation-$policy$LABEL"
        servesim validate scenarios/quickstart.yaml --profile "$PROFILE" --device cuda --repeats "$REPEATS" \
          --set model="$MODEL" --set hardware.gpu="$GPU" --set workload.num_requests="$NREQ" --set scheduler.policy="$policy" \
          ${RATE:+--set workload.arrival.rate="$RATE"} --out "$OUT/$name" > "$OUT/$name.log" 2>&1
        tail -25 "$OUT/$name.log"
      done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
  echo "== $stage: $(( $(date +%s) - start )) s"
done
