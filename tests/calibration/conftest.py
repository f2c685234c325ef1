"""Fixtures for the calibration tests: one quick profile of tiny-llama-12m, tiny scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

MODEL = "tiny-llama-12m"


def write_scenario(path: Path, policy: str = "continuous", requests: int = 12, rate: float = 6.0,
                   **extra) -> Path:
    sched = {"policy": policy, "max_num_seqs": 8}
    sched.update({"max_batched_tokens": 256} if policy == "continuous" else {"chunk_size": 64})
    data = {"name": f"tiny-{policy}", "seed": 2, "model": MODEL, "scheduler": sched,
            "workload": {"num_requests": requests, "arrival": {"process": "poisson", "rate": rate},
                         "prompt_len": {"dist": "uniform", "min": 16, "max": 100},
                         "output_len": {"dist": "uniform", "min": 4, "max": 20}}}
    data.update(extra)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def torch_threads():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def quick_profile(tmp_path_factory, torch_threads) -> Path:
    """``servesim calibrate --quick --repeats 3`` of tiny-llama-12m on the CPU (seconds)."""
    from sim.cli.app import main

    path = tmp_path_factory.mktemp("profile") / "tiny.json"
    assert main(["calibrate", "--model", MODEL, "--quick", "--repeats", "3", "--no-progress",
                 "--out", str(path)]) == 0
    return path


@pytest.fixture
def scenario(tmp_path) -> Path:
    return write_scenario(tmp_path / "tiny.yaml")
