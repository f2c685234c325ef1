"""Fixtures for the calibration tests: a quick profile of tiny-llama-12m on the engine, one of
the stand-in engine whose step times are given (``fake_engine``), tiny scenarios."""

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


@pytest.fixture(scope="session")
def given_profile(tmp_path_factory) -> Path:
    """``servesim calibrate --quick --repeats 3`` of the stand-in engine (``fake_engine``): every
    figure in it is known in advance."""
    pytest.importorskip("torch")
    from sim.cli.app import main
    from tests.calibration import fake_engine

    path = tmp_path_factory.mktemp("given") / "given.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("calibration.calibrate.load_engine", lambda opts: fake_engine.target())
        assert main(["calibrate", "--model", MODEL, "--quick", "--repeats", "3", "--no-progress",
                     "--out", str(path)]) == 0
    return path


@pytest.fixture
def fake_engine_runs(monkeypatch):
    """``servesim validate`` runs the stand-in engine on virtual time instead of the engine."""
    from tests.calibration import fake_engine

    monkeypatch.setattr("calibration.validate.EngineRuns", fake_engine.FakeEngineRuns)


@pytest.fixture
def scenario(tmp_path) -> Path:
    return write_scenario(tmp_path / "tiny.yaml")
