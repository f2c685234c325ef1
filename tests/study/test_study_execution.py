"""Executors agree; resume skips finished runs; Ctrl-C keeps them; broken runs don't sink it."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from sim.study.driver import execute_plan
from sim.study.plan import plan_study
from sim.study.runners import PoolRunner, SerialRunner, make_runner
from sim.study.schema import load_study
from sim.study.store import RunStore

from .helpers import SMALL, crash_on_replicas_3, report_sigint_handler, write_study

STUDY = {
    "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"],
                      "replicas": [1, 2]}},
    "objective": {"kind": "max_rate", "bracket": [2, 40], "rel_tol": 0.15},
}
VOLATILE = ["wall_s"]


def make_plan(tmp_path, study=STUDY):
    path = write_study(tmp_path, study, SMALL)
    return plan_study(load_study(path), path)


def table(result) -> pd.DataFrame:
    return result.outcome.runs.drop(columns=VOLATILE).reset_index(drop=True)


class Counting(SerialRunner):
    """In-process, counting what it is asked to run; can be 'interrupted' after n runs."""

    def __init__(self, interrupt_after: int | None = None):
        super().__init__()
        self.submitted: list[str] = []
        self.interrupt_after = interrupt_after
        self.finished = 0

    def submit(self, spec):
        self.submitted.append(spec.key)
        super().submit(spec)

    def next_done(self):
        if self.interrupt_after is not None and self.finished >= self.interrupt_after:
            raise KeyboardInterrupt
        self.finished += 1
        return super().next_done()


@pytest.fixture(scope="module")
def serial_result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    return execute_plan(make_plan(tmp), RunStore(tmp / "out"), SerialRunner())


def test_local_pool_agrees_with_serial(tmp_path, serial_result):
    with PoolRunner(2) as ex:
        pooled = execute_plan(make_plan(tmp_path), RunStore(tmp_path / "out"), ex)
    assert pooled.progress.failed == 0
    pd.testing.assert_frame_equal(table(pooled), table(serial_result), rtol=1e-12)
    pd.testing.assert_frame_equal(pooled.outcome.configs, serial_result.outcome.configs)


@pytest.mark.slow
def test_ray_agrees_with_serial(tmp_path, serial_result):
    pytest.importorskip("ray")
    with make_runner("ray", jobs=2) as ex:
        ray_result = execute_plan(make_plan(tmp_path), RunStore(tmp_path / "out"), ex)
    pd.testing.assert_frame_equal(table(ray_result), table(serial_result), rtol=1e-12)


def test_resume_skips_finished_runs(tmp_path, serial_result):
    first = Counting()
    a = execute_plan(make_plan(tmp_path), RunStore(tmp_path / "out"), first)
    assert len(first.submitted) == a.progress.done > 0
    again = Counting()
    b = execute_plan(make_plan(tmp_path), RunStore(tmp_path / "out"), again)
    assert again.submitted == []
    assert b.progress.reused == b.progress.done == a.progress.done
    pd.testing.assert_frame_equal(table(b), table(serial_result))


def test_an_interrupted_study_resumes_from_the_runs_written(tmp_path, serial_result):
    out = tmp_path / "out"
    cut = Counting(interrupt_after=5)
    partial = execute_plan(make_plan(tmp_path), RunStore(out), cut)
    assert partial.interrupted
    lines = (out / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 5  # every finished run was written before the interrupt
    rest = Counting()
    done = execute_plan(make_plan(tmp_path), RunStore(out), rest)
    assert not done.interrupted
    assert done.progress.reused == 5
    assert len(rest.submitted) == done.progress.done - 5
    assert not set(rest.submitted) & {json.loads(x)["key"] for x in lines}
    pd.testing.assert_frame_equal(table(done), table(serial_result))


def test_a_torn_last_line_is_ignored(tmp_path):
    out = tmp_path / "out"
    execute_plan(make_plan(tmp_path), RunStore(out), Counting(interrupt_after=3))
    with (out / "runs.jsonl").open("a") as f:
        f.write('{"key": "abc", "status": "o')  # killed mid-write
    store = RunStore(out)
    assert len(store.records) == 3 and store.skipped_lines == 1


def test_a_broken_run_does_not_sink_the_study(tmp_path):
    plan = make_plan(tmp_path)
    # Break one configuration after validation, as a run that fails inside the simulator.
    bad = plan.configs[1]
    plan.configs[1] = dataclasses.replace(bad, data={**bad.data, "replicas": "many"})
    with PoolRunner(2) as ex:
        result = execute_plan(plan, RunStore(tmp_path / "out"), ex)
    cfg = result.outcome.configs.set_index("config_index")
    assert cfg.loc[1, "outcome"] == "error" and "replicas" in cfg.loc[1, "error"]
    assert (cfg.drop(index=1)["outcome"] != "error").all()
    assert cfg.drop(index=1)["max_rate"].notna().all()
    runs = result.outcome.runs
    assert (runs["status"] == "error").sum() >= 1 and (runs["status"] == "ok").sum() >= 6
    assert result.outcome.best is not None and result.outcome.best["config_index"] != 1


def test_a_worker_that_dies_is_recorded_and_the_pool_recovers(tmp_path):
    study = {"vary": {"grid": {"replicas": [1, 3, 2]}},
             "objective": {"kind": "curves", "rates": [5, 10]}}
    plan = make_plan(tmp_path, study)
    with PoolRunner(2, fn=crash_on_replicas_3) as ex:
        result = execute_plan(plan, RunStore(tmp_path / "out"), ex)
    runs = result.outcome.runs
    dead = runs[runs["replicas"] == 3]
    assert (dead["status"] == "error").all()
    assert dead["error"].str.contains("worker process died").all()
    assert (runs[runs["replicas"] != 3]["status"] == "ok").all()


def test_pool_workers_leave_ctrl_c_to_the_parent(tmp_path):
    """A terminal's Ctrl-C reaches every worker; they ignore it, the parent stops them."""
    plan = make_plan(tmp_path)
    with PoolRunner(2, fn=report_sigint_handler) as ex:
        for config in plan.configs[:2]:
            ex.submit(plan.spec(config, 5.0))
        records = [ex.next_done()[1] for _ in range(2)]
    assert all(rec["sigint_ignored"] for rec in records)


class RacyPool:
    """A pool whose worker dies on ``crash`` keys, noticed by the *next* submit.

    That is the race a real ``ProcessPoolExecutor`` has: ``wait`` hands back a finished run,
    then the pool breaks before the executor submits the next one, and submit raises.
    """

    def __init__(self, crash: set[str]):
        self.crash, self.broken = crash, False

    def submit(self, fn, spec):
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        if self.broken:
            raise BrokenProcessPool("a child process terminated abruptly")
        fut = Future()
        if spec.key in self.crash:
            self.broken = True
            fut.set_exception(BrokenProcessPool("a child process terminated abruptly"))
        else:
            fut.set_result({"key": spec.key, "status": "ok", "error": None})
        return fut

    def shutdown(self, wait=True, cancel_futures=False):
        return None


def test_a_pool_that_breaks_between_wait_and_submit_recovers(tmp_path, monkeypatch):
    plan = make_plan(tmp_path, {"vary": {"grid": {"replicas": [1, 3, 2]}},
                                "objective": {"kind": "curves", "rates": [5, 10]}})
    specs = [plan.spec(c, rate) for c in plan.configs for rate in (5.0, 10.0)]
    deadly = specs[2].key
    monkeypatch.setattr(PoolRunner, "_new_pool", lambda self: RacyPool({deadly}))
    ex = PoolRunner(2)
    for spec in specs:
        ex.submit(spec)
    got = {spec.key: rec for spec, rec in (ex.next_done() for _ in specs)}
    assert set(got) == {s.key for s in specs} and ex.in_flight == 0
    assert {k for k, r in got.items() if r["status"] == "error"} == {deadly}
    assert "worker process died" in got[deadly]["error"]
