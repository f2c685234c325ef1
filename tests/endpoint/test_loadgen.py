"""The load generator against the fake server: its timing on the fake's virtual clock
(``virtual_time``), its tables, errors and many streams."""

import numpy as np
import pandas as pd
import pytest

from endpoint.loadgen import Options, Request, run
from endpoint.records import bench_metrics, itl_frame, requests_frame, write_run
from sim.loops.run import simulate
from sim.scenario.load import scenario_from_dict
from tests.endpoint.fake_server import Cost, FakeServer
from tests.endpoint.virtual_time import run_on_fake


def reqs(n, gap=0.05, prompt=20, out=6):
    return [Request(i, i * gap, list(range(100, 100 + prompt)), prompt, out) for i in range(n)]


def test_open_loop_sends_on_time_and_times_tokens(monkeypatch):
    """On the fake's virtual clock every time is the fake's schedule: each request, alone on
    the server, waits the overhead and one 20-token prefill step for its first token, then
    one decode step per token."""
    c = Cost()
    res = run_on_fake(monkeypatch, reqs(8, gap=0.05))
    assert res.mode == "open"
    sent = np.array([r.sent for r in res.records])
    np.testing.assert_allclose(sent, np.arange(8) * 0.05, atol=1e-9)  # at the schedule
    prefill = c.c0 + c.c_tok * 20 + c.c_seq
    decode = c.c0 + c.c_tok + c.c_seq
    for r in res.records:
        assert not r.error
        assert r.output_tokens == 6 and r.prompt_tokens == 20 and r.chunks == 6
        assert r.first_token - r.sent == pytest.approx(c.overhead + prefill, abs=1e-9)
        np.testing.assert_allclose(r.gaps, [decode] * 5, atol=1e-9)
        assert r.last_token - r.sent == pytest.approx(c.overhead + prefill + 5 * decode, abs=1e-9)
    assert res.client["send_lag_p99_ms"] == pytest.approx(0.0, abs=1e-6)
    assert res.client["cpu_per_chunk_us"] > 0


def test_closed_loop_keeps_concurrency_and_order(monkeypatch):
    res = run_on_fake(monkeypatch, reqs(9), closed=3)
    assert res.mode == "closed"
    recs = res.records
    sent = np.array([r.sent for r in recs])
    assert (np.diff(sent) >= 0).all()  # taken in order
    done = np.array([r.last_token for r in recs])
    for k in range(len(recs)):  # never more than 3 in flight
        in_flight = np.sum((sent <= sent[k] + 1e-9) & (done > sent[k] + 1e-9))
        assert in_flight <= 3
    # request 3 goes out the moment the first of 0..2 finishes
    assert sent[3] == pytest.approx(done[:3].min(), abs=1e-9)
    assert all(not r.error and r.output_tokens == 6 for r in recs)


def test_tables_have_the_simulators_columns(fake_server, tmp_path):
    res = run(reqs(4), Options(url=fake_server, model="fake"))
    df = requests_frame(res)
    sim_cols = list(simulate(scenario_from_dict({"model": "tiny-llama-12m", "workload": {"num_requests": 2}},
                                                "<t>")).requests.columns)
    assert list(df.columns) == [*sim_cols, "error"]
    assert (df["status"] == "finished").all()
    # vllm bench serve's TPOT: (E2E − TTFT) / (output tokens − 1)
    np.testing.assert_allclose(df["tpot"], (df["e2e"] - df["ttft"]) / (df["output_tokens"] - 1))
    itl = itl_frame(res)
    assert len(itl) == 4 * 5 and itl.groupby("request_id").size().eq(5).all()
    b = bench_metrics(df, itl, res.duration_s)
    assert b["completed"] == 4 and abs(b["mean_itl_ms"] - itl["gap_s"].mean() * 1e3) < 1e-9
    paths = write_run(tmp_path / "run", res, df, itl, {"scenario": "t"})
    assert pd.read_parquet(paths["requests"]).shape == df.shape
    assert not list(tmp_path.glob("run/.*"))  # no temporary files left behind


def test_server_errors_are_recorded_not_raised(fake_server):
    res = run(reqs(2), Options(url=fake_server, model="no-such-model"))
    assert all(r.error.startswith("HTTP 404") for r in res.records)
    df = requests_frame(res)
    assert (df["status"] == "rejected").all() and df["ttft"].isna().all()
    dead = run(reqs(1), Options(url="http://127.0.0.1:9", model="x", timeout_s=5))
    assert dead.records[0].error


def test_client_keeps_up_with_many_streams():
    """200 requests of 32 tokens at once against a fast fake: the client's event loop stays
    responsive and records every gap (its own overhead is what the report shows)."""
    cost = Cost(c0=0.002, c_tok=0.0, c_seq=0.00002, budget=4096, max_seqs=256, overhead=0.0)
    with FakeServer(cost) as url:
        res = run([Request(i, 0.0, [1, 2, 3], 3, 32) for i in range(200)], Options(url=url, model="fake"))
    assert all(not r.error and r.output_tokens == 32 for r in res.records)
    assert res.client["chunks"] >= 200 * 32
