"""Builders for study tests: tiny scenarios and study files written to a temporary folder."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import yaml

from sim.study.plan import RunSpec
from sim.study.worker import execute_run

# One request = one prefill of 1024 tokens (output 1 token), one at a time: a D/D/1 queue
# whose service time is the step time, so the SLO flips at a rate we can compute.
KNOWN = {
    "name": "known",
    "model": "llama-3-8b",
    # no API server's time per request: a request's TTFT is then the server's time on it (D/D/1)
    "engine": {"name": "vllm", "request_overhead_s": 0.0},
    "scheduler": {"policy": "continuous", "max_num_seqs": 1},
    "workload": {
        "num_requests": 200,
        "arrival": {"process": "constant", "rate": 1},
        "prompt_len": {"dist": "fixed", "value": 1024},
        "output_len": {"dist": "fixed", "value": 1},
    },
    "slo": {"ttft_s": 0.1},
}

# Small, quick and random: Poisson arrivals, mixed lengths.
SMALL = {
    "name": "small",
    "model": "llama-3-8b",
    "scheduler": {"policy": "continuous", "max_num_seqs": 64},
    "workload": {
        "num_requests": 120,
        "arrival": {"process": "poisson", "rate": 10},
        "prompt_len": {"dist": "uniform", "min": 32, "max": 1024},
        "output_len": {"dist": "uniform", "min": 8, "max": 128},
    },
    "slo": {"ttft_s": 0.3, "tpot_s": 0.03},
}


def write_study(folder: Path, study: dict, scenario: dict | None = None,
                name: str = "study.yaml") -> Path:
    """Write ``scenario`` (as base.yaml) and ``study`` (pointing at it) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    if scenario is not None:
        (folder / "base.yaml").write_text(yaml.safe_dump(scenario))
        study = {"scenario": "base.yaml", **study}
    path = folder / name
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def run_cli(capsys, *argv) -> tuple[int, str]:
    """``servesim ARGV`` in this process: its exit code and everything it printed, on one line."""
    from sim.cli.app import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def crash_on_replicas_3(spec: RunSpec) -> dict:
    """A run function whose worker process dies on configurations with 3 replicas."""
    if spec.data.get("replicas") == 3:
        os._exit(17)
    return execute_run(spec)


def report_sigint_handler(spec: RunSpec) -> dict:
    """A run function that reports how its worker process handles Ctrl-C (SIGINT)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    return {"key": spec.key, "status": "ok", "error": None, "sigint_ignored": ignored}
