"""Studies under faults: every run failing, torn records, a full disk, a kill while results are put
in place or while workers run, an unreachable Ray cluster, and a study too large to start unasked."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sim.cli.app import main
from sim.study.store import RUNS_FILE, RunStore

from .helpers import SMALL, run_cli, write_study

REPO = Path(__file__).resolve().parents[2]
TINY = {**SMALL, "workload": {**SMALL["workload"], "num_requests": 30}}
STUDY = {"name": "tiny", "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"]}},
         "objective": {"kind": "curves", "rates": [4, 8]}}


@pytest.fixture
def study(tmp_path):
    return write_study(tmp_path, STUDY, TINY)


def test_a_study_whose_every_run_failed_exits_1_with_the_first_failure(study, tmp_path, capsys, monkeypatch):
    import sim.loops.run

    def broken(*a, **k):
        raise RuntimeError("cannot cache function 'shape_into'")

    monkeypatch.setattr(sim.loops.run, "simulate", broken)
    code, text = run_cli(capsys, "study", study, "--out", tmp_path / "out", "--jobs", "1")
    assert code == 1, text
    assert "every run failed (4); the first, [policy=continuous] at rate 4: RuntimeError: cannot cache function" in text


def _lines(out: Path) -> list[str]:
    return (out / RUNS_FILE).read_text().splitlines()


def test_torn_records_are_reported_and_run_again_once(study, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(capsys, "study", study, "--out", out, "--jobs", "1")[0] == 0
    lines = _lines(out)
    assert len(lines) == 4
    damaged = lines[1].replace('"status": "ok"', '"status": "ko"')  # still JSON, no longer the record written
    assert damaged != lines[1]
    (out / RUNS_FILE).write_text("\n".join([lines[0], damaged, lines[2], lines[3]]) + "\n" + lines[3][:40])
    code, text = run_cli(capsys, "study", study, "--out", out, "--jobs", "1")
    assert code == 0, text
    assert "2 torn line(s)" in text and "their runs run again" in text
    assert "4 runs (3 reused, 0 failed)" in text  # the damaged record's run again; the cut line was a copy
    again = _lines(out)
    assert len(again) == 4 and RunStore.read(out / RUNS_FILE)[2] == 0
    code, text = run_cli(capsys, "study", study, "--out", out, "--jobs", "1")
    assert code == 0 and "torn line" not in text and "4 runs (4 reused, 0 failed)" in text


def test_a_full_disk_while_recording_runs_is_reported_and_leaves_no_torn_line(study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    import sim.study.store

    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(sim.study.store.os, "fsync", fsync)
    code, text = run_cli(capsys, "study", study, "--out", out, "--jobs", "1")
    assert code == 2, text
    assert "the disk is full" in text and "run the same command again to resume" in text and "Traceback" not in text
    store = RunStore(out)
    assert len(store.records) == 2 and store.torn_lines == 0
    assert (out / RUNS_FILE).read_text().endswith("\n")
    monkeypatch.setattr(sim.study.store.os, "fsync", real_fsync)
    code, text = run_cli(capsys, "study", study, "--out", out, "--jobs", "1")
    assert code == 0 and "4 runs (2 reused, 0 failed)" in text


class Killed(BaseException):
    """What a kill -9 at that moment would leave: nothing after it runs."""


def _kill_at(monkeypatch, module, name: str, nth: int, under: Path) -> None:
    """Stop the process at the ``nth`` call of ``module.name`` on a path under ``under``."""
    real, calls = getattr(module, name), []

    def fn(*a, **k):
        if any(str(under) in os.fsdecode(x) for x in a[:2] if isinstance(x, (str, bytes, os.PathLike))):
            calls.append(a)
            if len(calls) == nth:
                raise Killed
        return real(*a, **k)

    monkeypatch.setattr(module, name, fn)


@pytest.mark.parametrize("where", ["exchange", "two renames"])
def test_a_kill_while_results_are_put_in_place_never_mixes_two_runs(tmp_path, capsys, monkeypatch, where):
    import sim.results.atomic as atomic

    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: llama-3-8b\nworkload: {num_requests: 20, arrival: {process: poisson, rate: 5}}\n")
    out = tmp_path / "out"
    assert run_cli(capsys, "run", scenario, "--out", out)[0] == 0
    old = pd.read_parquet(out / "requests.parquet")
    if where == "two renames":  # a file system that cannot exchange folders: killed between the renames
        monkeypatch.setattr(atomic, "_renameat2", lambda a, b: False)
        _kill_at(monkeypatch, atomic.os, "rename", 2, tmp_path)
    else:  # killed at every moment before the exchange (the last: the file-by-file renames of today)
        _kill_at(monkeypatch, atomic.os, "replace", 2, tmp_path)
    with contextlib.suppress(Killed):
        main(["run", str(scenario), "--out", str(out), "--set", "seed=7"])
    capsys.readouterr()
    if out.exists():
        seed = json.loads((out / "summary.json").read_text())["config"]["seed"]
        same = pd.read_parquet(out / "requests.parquet").equals(old)
        assert (seed == 0 and same) or (seed == 7 and not same), "the folder mixes two runs"
    else:  # between two renames: the folder is briefly absent, its previous contents kept aside
        aside = [p for p in tmp_path.iterdir() if p.name.startswith(".out.servesim-")]
        assert any(pd.read_parquet(p / "requests.parquet").equals(old) for p in aside if p.is_dir())


def _group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (from /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(d.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_die_with_a_killed_study_and_release_its_streams(tmp_path):
    study = write_study(tmp_path, {**STUDY, "vary": {"grid": {"seed": list(range(6))}}}, TINY)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SERVESIM_JIT": "0"}  # long runs, nothing to compile
    cmd = [sys.executable, "-m", "sim.cli", "study", str(study), "--out", str(tmp_path / "out"), "--jobs", "2",
           "--set", "workload.num_requests=200000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a bound on speed
        while len(_group(proc.pid)) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the study, its fork server, its resource tracker and workers
        assert proc.poll() is None and len(_group(proc.pid)) >= 4, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=120)  # EOF on both streams: nothing else holds them
        deadline = time.monotonic() + 120
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group(proc.pid) == [], "processes outlived the study"
    finally:
        for pid in _group(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.kill()


def _study_on_ray(study: Path, out: Path, port: int, wait_s: int) -> tuple[int, str]:
    """``servesim study --runner ray --address 127.0.0.1:PORT`` in a subprocess (a hang fails it)."""
    p = subprocess.run([sys.executable, "-m", "sim.cli", "study", str(study), "--out", str(out), "--runner", "ray",
                        "--address", f"127.0.0.1:{port}", "--connect-timeout", str(wait_s)],
                       capture_output=True, text=True, cwd=REPO, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    return p.returncode, " ".join(p.stderr.split())


def test_an_unreachable_ray_cluster_is_refused_not_waited_on(study, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    code, text = _study_on_ray(study, tmp_path / "out", port, 2)
    assert code == 2, text
    assert f"--address: 127.0.0.1:{port}: cannot reach Ray at 127.0.0.1:{port} (Connection refused" in text
    assert "Traceback" not in text
    assert not (tmp_path / "out" / RUNS_FILE).exists()


def test_an_address_that_accepts_but_never_answers_is_refused_after_the_timeout(study, tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts connections (the kernel does), never says a word
        code, text = _study_on_ray(study, tmp_path / "out", silent.getsockname()[1], 3)
    assert code == 2, text
    assert "Ray there did not answer within 3 s" in text and "Traceback" not in text


def test_a_large_study_needs_yes_or_a_max_runs_it_fits(tmp_path, capsys, monkeypatch):
    import sim.study.runners

    big = write_study(tmp_path, {**STUDY, "vary": {"grid": {"seed": list(range(30))}}},
                      {**TINY, "workload": {**TINY["workload"], "num_requests": 5_000_000}})
    monkeypatch.setattr(sim.study.runners, "make_runner", lambda *a, **k: pytest.fail("ran without asking"))
    out = tmp_path / "out"
    code, text = run_cli(capsys, "study", big, "--out", out, "--jobs", "2")
    assert code == 2 and "up to 60 runs, about" in text and "run it with --yes" in text and "--max-runs" in text
    code, text = run_cli(capsys, "study", big, "--out", out, "--jobs", "2", "--max-runs", "59")
    assert code == 2 and "more than --max-runs 59" in text
    assert not (out / RUNS_FILE).exists()
    for extra in (["--yes"], ["--max-runs", "60"]):
        with pytest.raises(pytest.fail.Exception, match="ran without asking"):
            main(["study", str(big), "--out", str(out), "--jobs", "2", *extra])
    capsys.readouterr()
