"""End to end against a live vLLM (CPU build): start it, calibrate (quick), validate a small
workload. Skipped when vLLM's virtual environment or the converted model is not there
(``bash benchmarks/vllm_cpu/install.sh`` makes both; ``VLLM_VENV`` / ``VLLM_MODEL`` point
elsewhere)."""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from benchmarks.vllm_cpu import server as vllm
from sim.cli.app import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live_vllm(tmp_path_factory):
    why = vllm.installed()
    if why:
        pytest.skip(f"vLLM is not installed: {why}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with vllm.start(port, log) as srv:
        yield srv.url


def test_calibrate_and_validate_against_vllm(live_vllm, tmp_path):
    prof = tmp_path / "profile.json"
    # --force: a quick calibration on a busy machine may miss its own saturation check by over 5%
    # (then it says so in the profile's notes); the smoke test is about the path end to end
    assert main(["calibrate", "--endpoint", live_vllm, "--quick", "--out", str(prof), "--no-progress",
                 "--force"]) == 0
    p = json.loads(prof.read_text())
    assert p["source"] == "endpoint" and p["grid"]["server"]["engine"] == "vllm"
    assert p["grid"]["scheduler"]["chunk_size"] == 512  # vllm.ARGS: --max-num-batched-tokens 512
    assert p["grid"]["scheduler"]["kv_blocks"] > 0
    data = yaml.safe_load(prof.with_suffix(".scenario.yaml").read_text())
    data["cost"]["profile"] = str(prof)
    data["scheduler"]["max_num_seqs"] = 32
    data |= {"name": "vllm-smoke", "seed": 5, "workload": {
        "num_requests": 12, "arrival": {"process": "poisson", "rate": 0.8},
        "prompt_len": {"dist": "uniform", "min": 32, "max": 400},
        "output_len": {"dist": "uniform", "min": 8, "max": 48}}}
    sc = tmp_path / "smoke.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "val"
    code = main(["validate", str(sc), "--endpoint", live_vllm, "--profile", str(prof), "--out", str(out),
                 "--repeats", "2", "--max-error", "e2e=0.5"])
    v = json.loads((out / "validation.json").read_text())
    assert code == 0, v["errors"]
    assert v["requests"]["joined"] == 12
    assert v["breakdown"]["prefill"]["real"] > 0  # the server's own stage times were read
