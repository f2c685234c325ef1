"""What ``servesim validate`` keeps in the profile (``command_io.record_validation``): each
metric's median per-request error where it was measured, the run's throughput error; a profile
that cannot be written is left as it was, with a warning."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from calibration import command_io
from sim.pricing.profile import load_profile

REPO = Path(__file__).resolve().parents[2]


class Console:
    def __init__(self):
        self.lines: list[str] = []

    def print(self, text: str) -> None:
        self.lines.append(text)


def validation(joined: int = 5):
    nan = math.nan
    return SimpleNamespace(
        joined=pd.DataFrame({"request_id": range(joined)}),
        errors={"ttft": {"n": 5, "median": 0.12, "p90": 0.3, "max": 0.4, "bias": -0.1},
                "tpot": {"n": 0, "median": nan, "p90": nan, "max": nan, "bias": nan},
                "e2e": {"n": 5, "median": 0.05, "p90": 0.1, "max": 0.2, "bias": 0.04}},
        summary={"output_token_throughput": {"real": 100.0, "sim": 92.0, "diff": -8.0, "rel_diff": -0.08}},
        real=SimpleNamespace(scenario=SimpleNamespace(name="chat")))


@pytest.fixture
def profile(tmp_path) -> Path:
    return Path(shutil.copy(REPO / "calibration" / "profiles" / "a100-llama-2-70b-tp2.json", tmp_path / "p.json"))


def test_the_measured_errors_are_recorded_and_a_metric_not_measured_is_left_out(profile):
    console = Console()
    command_io.record_validation(validation(), profile, "the endpoint http://box:8000 (m)", console)
    rec = load_profile(profile).validation
    assert rec.errors == {"ttft": 0.12, "e2e": 0.05, "throughput": 0.08}
    assert rec.bias == {"ttft": -0.1, "e2e": 0.04, "throughput": -0.08}
    assert (rec.requests, rec.scenario, rec.against) == (5, "chat", "the endpoint http://box:8000 (m)")
    assert console.lines == [f"recorded in {profile} (its validation: the error band of runs priced by it)"]


def test_a_profile_that_cannot_be_written_is_left_as_it_was(profile, monkeypatch):
    before = profile.read_text()

    def refuse(*a):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(command_io, "write_profile", refuse)
    console = Console()
    command_io.record_validation(validation(), profile, "x", console)
    assert profile.read_text() == before
    assert console.lines[0].startswith(f"[yellow]warning:[/] the validation is not recorded in the profile {profile}")
    command_io.record_validation(validation(joined=0), profile, "x", console)
    assert "no request finished in both runs" in console.lines[1]
