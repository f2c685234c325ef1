"""The first run of a fresh checkout runs the core as Python while numba builds it in the background."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import prebuild as build
from sim.core import buildcache
from sim.loops.run import simulate
from sim.scenario.load import load_scenario

REPO = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (build.BACKGROUND_ENV, build.JIT_ENV)}
    return {**env, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), **extra}


def _stop_builder(cache: Path) -> None:
    for lock in cache.glob("*.building"):
        pid = int(lock.read_text())
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)  # the builder leads its own session


def test_a_first_small_run_runs_as_python_and_starts_the_build(tmp_path):
    out = tmp_path / "out"
    try:
        p = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", str(out),
                            "--set", "workload.num_requests=300"],
                           capture_output=True, text=True, env=_env(tmp_path), cwd=REPO, timeout=300)
        assert p.returncode == 0, p.stderr
        assert "first run of this version of the core" in p.stdout
        assert json.loads((out / "summary.json").read_text())["loop"] == "interpreted"
        cache = tmp_path / "numba"  # building, or (a quick build on an idle machine) already built
        assert list(cache.glob("*.building")) or list(cache.glob("*.ready")), "no background build was started"
    finally:
        _stop_builder(tmp_path / "numba")
    compiled = simulate(load_scenario(None, ["workload.num_requests=300"]))
    assert compiled.loop == "compiled"
    pd.testing.assert_frame_equal(pd.read_parquet(out / "requests.parquet"), compiled.requests)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "steps.parquet"), compiled.steps, check_dtype=False)


def test_a_ready_build_or_a_large_run_or_an_explicit_loop_compiles_in_the_foreground(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(build.BACKGROUND_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "sim.core.jit")  # as in a fresh CLI process (restored afterwards)
    assert build.should_interpret_first_run("auto", 2_000)
    assert not build.should_interpret_first_run("auto", build.INTERPRET_UP_TO + 1)
    assert not build.should_interpret_first_run("compiled", 2_000)
    assert not build.should_interpret_first_run("simpy", 2_000)
    buildcache.marker().write_text(buildcache.CORE_STAMP)
    assert not build.should_interpret_first_run("auto", 2_000)
    buildcache.marker().unlink()
    monkeypatch.setenv(build.BACKGROUND_ENV, "0")
    assert not build.should_interpret_first_run("auto", 2_000)


@pytest.mark.parametrize("name", ["speculative-decoding", "disaggregated", "pipeline-parallel-70b",
                                  "shared-prompts", "vidur-a100-llama2-70b", "multi-class", "kv-tiers"])
def test_the_core_as_python_gives_the_compiled_results(tmp_path, name):
    path = REPO / "scenarios" / f"{name}.yaml"
    sets = ["workload.num_requests=150"] if name != "multi-class" else ["workload.duration_s=20"]
    code = ("import sys, pickle; from sim.loops.run import simulate; from sim.scenario.load import load_scenario;"
            "r = simulate(load_scenario(sys.argv[1], sys.argv[2:])); assert r.loop == 'interpreted', r.loop;"
            "pickle.dump((r.requests, r.steps, r.summary), open(sys.argv[0] + '.pkl', 'wb'))")
    script = tmp_path / "run.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script), str(path), *sets], capture_output=True, text=True,
                       env=_env(tmp_path, **{build.JIT_ENV: "0"}), cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr
    import pickle

    requests, steps, summary = pickle.loads(Path(str(script) + ".pkl").read_bytes())
    compiled = simulate(load_scenario(path, sets))
    pd.testing.assert_frame_equal(requests, compiled.requests)
    pd.testing.assert_frame_equal(steps, compiled.steps)
    assert json.dumps(summary, sort_keys=True) == json.dumps(compiled.summary, sort_keys=True)


def test_other_versions_builds_unused_for_a_month_are_pruned(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = buildcache.user_cache().parent
    now = 1_000_000_000.0
    old, recent, other = root / "numba-0000000000000000", root / "numba-1111111111111111", root / "plotly.js"
    for folder in (old, recent, buildcache.user_cache()):
        folder.mkdir(parents=True)
        (folder / "core_x").mkdir()
    other.write_text("kept")
    os.utime(old, (now - 40 * 86400, now - 40 * 86400))
    (recent / "servesim-1111111111111111.ready").write_text("")
    os.utime(recent, (now - 40 * 86400, now - 40 * 86400))
    os.utime(recent / "servesim-1111111111111111.ready", (now - 2 * 86400, now - 2 * 86400))  # used lately
    os.utime(buildcache.user_cache(), (now - 90 * 86400, now - 90 * 86400))  # this version's build is never pruned
    assert build.prune_old_builds(now) == [old]
    assert not old.exists() and recent.exists() and buildcache.user_cache().exists() and other.exists()


def test_what_run_imports_before_choosing_leaves_the_core_unloaded():
    """``run`` decides to run as Python before the core is imported; the modules it imports for
    that decision must not load the core (an import of the error band once did, and every first
    run then waited for numba)."""
    code = ("import sys, sim.cli.app, sim.cli.prebuild, sim.results.write, sim.scenario.load, sim.traffic; "
            "print('sim.core.jit' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
