"""The step log's frame is grouped by engine, in time order, so each engine's steps are a slice."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.loops.run import kv_utilization, simulate
from sim.results.steplog import engine_rows
from sim.scenario.load import load_scenario, scenario_from_dict


def test_grouped_engines_are_slices_and_others_are_sorted_first():
    order, rows = engine_rows(np.array([0, 0, 1, 3, 3, 3]))
    assert order is None and rows == {0: slice(0, 2), 1: slice(2, 3), 3: slice(3, 6)}
    engine = np.array([1, 0, 1, 0])
    order, rows = engine_rows(engine)
    assert order.tolist() == [1, 3, 0, 2] and all((engine[order[sl]] == e).all() for e, sl in rows.items())
    assert engine_rows(np.zeros(0, int)) == (None, {})


def test_kv_utilization_divides_by_each_steps_own_engine():
    steps = pd.DataFrame({"engine": [1, 0, 1], "kv_blocks_used": [5, 2, 10]})
    assert kv_utilization(steps, np.array([4.0, 10.0])).tolist() == [0.5, 0.5, 1.0]


def test_a_runs_steps_come_engine_by_engine_in_time_order():
    r = simulate(scenario_from_dict({"replicas": 3, "workload": {"num_requests": 300}}, "<t>"))
    s = r.steps
    assert s["engine"].is_monotonic_increasing and s["engine"].nunique() == 3
    assert all(g["start"].is_monotonic_increasing for _, g in s.groupby("engine"))
    cap = (s["kv_blocks_used"] / s["kv_utilization"]).round(6)
    assert cap[s["kv_blocks_used"] > 0].groupby(s["engine"]).nunique().eq(1).all()


def test_parquet_encodes_each_column_by_its_kind_and_reads_back_the_same(tmp_path):
    import pyarrow.parquet as pq

    from sim.cli.app import main

    assert main(["run", "--out", str(tmp_path), "--set", "workload.num_requests=200"]) == 0
    encodings = {}
    for table in ("steps", "requests"):
        group = pq.ParquetFile(tmp_path / f"{table}.parquet").metadata.row_group(0)
        encodings |= {group.column(i).path_in_schema: set(group.column(i).encodings) for i in range(group.num_columns)}
    assert {"DELTA_BINARY_PACKED"} <= encodings["engine"] and {"DELTA_BINARY_PACKED"} <= encodings["queue_len"]
    assert {"BYTE_STREAM_SPLIT"} <= encodings["start"] and {"BYTE_STREAM_SPLIT"} <= encodings["ttft"]
    assert any("DICTIONARY" in e for e in encodings["status"])
    assert not any("DICTIONARY" in e for e in encodings["start"] | encodings["kv_utilization"])
    r = simulate(load_scenario(None, ["workload.num_requests=200"]))  # the run's own scenario
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "requests.parquet"), r.requests)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "steps.parquet"), r.steps)


def test_chunks_of_every_size_come_out_engine_by_engine_with_every_row():
    """Chunks of one engine and of several, over many doublings of each engine's buffers."""
    from types import SimpleNamespace

    from sim.core.state import LOG_INT_COLUMNS, LOG_ROWS, LogColumn, RunCounter
    from sim.results.steplog import StepLog

    rng = np.random.default_rng(7)
    core = SimpleNamespace(run_counters=np.zeros(len(RunCounter), dtype=np.int64),
                           log_i=np.zeros((len(LOG_INT_COLUMNS), LOG_ROWS), dtype=np.int32),
                           log_f=np.zeros((2, LOG_ROWS)))
    log, sent, t = StepLog(), [], 0.0
    for k in range(12):
        n = int(rng.integers(1, LOG_ROWS)) if k % 3 else LOG_ROWS
        engine = np.zeros(n, dtype=np.int32) if k % 4 == 1 else rng.integers(0, 3, n).astype(np.int32)
        start = t + np.arange(n, dtype=float)
        t += n
        core.log_f[0, :n], core.log_f[1, :n] = start, 0.5
        core.log_i[:, :n] = rng.integers(0, 1000, (len(LOG_INT_COLUMNS), n))
        core.log_i[LogColumn.ENGINE, :n] = engine
        core.run_counters[RunCounter.LOG_N] = n
        sent.append(pd.DataFrame({"start": start.copy(), "engine": engine.copy(),
                                  "num_tokens": core.log_i[LogColumn.NUM_TOKENS, :n].copy()}))
        log.take(core)
    want = pd.concat(sent).sort_values(["engine", "start"], kind="stable").reset_index(drop=True)
    got = log.frame(core)
    assert len(got) == len(want) > 6 * LOG_ROWS
    assert got["engine"].tolist() == want["engine"].tolist() and np.array_equal(got["start"], want["start"])
    assert np.array_equal(got["num_tokens"], want["num_tokens"])
