"""A study or compare on a cold build cache says that its first runs wait for numba's build,
instead of sitting at 0/N in silence."""

from __future__ import annotations

import pytest

from sim.core import buildcache
from sim.study import cli

from .helpers import SMALL, run_cli, write_study


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty build folder of its own (NUMBA_CACHE_DIR), numba allowed."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(buildcache.JIT_ENV, raising=False)
    buildcache.build_folder.cache_clear()
    yield tmp_path / "cache"
    buildcache.build_folder.cache_clear()


def test_a_cold_cache_is_noticed(cache):
    pytest.importorskip("numba")
    assert cli.build_waits()
    loops = cache / "loops"
    loops.mkdir(parents=True)
    (loops / "compiled.run_events-43.py311.1.nbc").write_bytes(b"")  # an earlier run's build of the loop
    assert not cli.build_waits()


def test_no_wait_when_the_core_runs_as_python(cache, monkeypatch):
    monkeypatch.setenv(buildcache.JIT_ENV, "0")
    assert not cli.build_waits()


def test_study_and_compare_say_why_they_wait(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "build_waits", lambda: True)
    path = write_study(tmp_path, {"vary": {"grid": {"replicas": [1, 2]}},
                                  "objective": {"kind": "cheapest", "rate": None}},
                       {**SMALL, "workload": {**SMALL["workload"], "num_requests": 20}})
    code, text = run_cli(capsys, "study", path, "--out", tmp_path / "st", "--jobs", "1")
    assert code == 0 and "the compiled core of this version is not built yet" in text
    code, text = run_cli(capsys, "compare", tmp_path / "base.yaml", tmp_path / "base.yaml", "--out",
                         tmp_path / "cmp", "--jobs", "1")
    assert code == 0 and "the compiled core of this version is not built yet" in text
    monkeypatch.setattr(cli, "build_waits", lambda: False)
    code, text = run_cli(capsys, "study", path, "--out", tmp_path / "st2", "--jobs", "1")
    assert code == 0 and "not built yet" not in text
