import numpy as np
import pandas as pd

from endpoint.loadgen import Options, Request, run
from endpoint.records import bench_metrics, itl_frame, requests_frame, write_run
from sim.loops.run import simulate
from sim.scenario.schema import scenario_from_dict
from tests.endpoint.fake_server import Cost, FakeServer


def reqs(n, gap=0.05, prompt=20, out=6):
    return [Request(i, i * gap, list(range(100, 100 + prompt)), prompt, out) for i in range(n)]


def test_open_loop_sends_on_time_and_times_tokens(fake_server):
    res = run(reqs(8, gap=0.05), Options(url=fake_server, model="fake"))
    assert res.mode == "open"
    sent = np.array([r.sent for r in res.records])
    assert np.all(np.abs(sent - np.arange(8) * 0.05) < 0.03)  # at the schedule
    for r in res.records:
        assert not r.error
        assert r.output_tokens == 6 and r.prompt_tokens == 20 and r.chunks == 6
        assert len(r.gaps) == 5
        assert r.sent < r.first_token <= r.last_token
        # a decode step of the fake takes at least c0 + c_tok + c_seq
        assert min(r.gaps) > 0.005
    assert res.client["send_lag_p99_ms"] < 30
    assert res.client["cpu_per_chunk_us"] > 0


def test_closed_loop_keeps_concurrency_and_order(fake_server):
    res = run(reqs(9), Options(url=fake_server, model="fake"), closed=3)
    assert res.mode == "closed"
    recs = res.records
    sent = np.array([r.sent for r in recs])
    assert (np.diff(sent) >= -1e-6).all()  # taken in order
    done = np.array([r.last_token for r in recs])
    for k in range(len(recs)):  # never more than 3 in flight
        in_flight = np.sum((sent <= sent[k] + 1e-9) & (done > sent[k] + 1e-9))
        assert in_flight <= 3
    # request 3 goes out when the first of 0..2 finishes
    assert abs(sent[3] - done[:3].min()) < 0.02


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
