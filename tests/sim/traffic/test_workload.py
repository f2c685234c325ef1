"""Arrival processes, length distributions and trace replay."""

from __future__ import annotations

import numpy as np
import pytest

from sim.traffic import build_workload, read_azure_trace, rescale_times
from sim.traffic.arrivals import arrival_times
from tests.sim.helpers import scenario


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("process,cv", [("poisson", 1.0), ("gamma", 3.0), ("gamma", 0.5),
                                        ("constant", 0.0)])
def test_arrival_rate_and_burstiness(process, cv):
    t = arrival_times(process, 10.0, rng(), num_requests=50_000, duration_s=None, cv=cv or 1.0)
    gaps = np.diff(t)
    assert t[0] == 0 and (gaps >= 0).all()
    assert 1 / gaps.mean() == pytest.approx(10.0, rel=0.03)
    measured_cv = gaps.std() / gaps.mean()
    assert measured_cv == pytest.approx(cv, abs=0.05)


def test_duration_cuts_arrivals():
    t = arrival_times("poisson", 50.0, rng(), num_requests=None, duration_s=20.0)
    assert t.max() < 20.0
    assert len(t) == pytest.approx(1000, rel=0.15)


@pytest.mark.parametrize("spec,lo,hi,mean", [
    ({"dist": "fixed", "value": 7}, 7, 7, 7),
    ({"dist": "uniform", "min": 5, "max": 9}, 5, 9, 7),
    ({"dist": "normal", "mean": 100, "std": 10, "min": 1}, 1, None, 100),
    ({"dist": "lognormal", "mean": 300, "sigma": 0.5, "min": 1}, 1, None, 300),
    ({"dist": "lognormal", "mean": 300, "sigma": 1.5, "min": 10, "max": 400}, 10, 400, None),
])
def test_length_distributions(spec, lo, hi, mean):
    w = build_workload(scenario(workload__num_requests=20_000, workload__prompt_len=spec))
    p = w.prompt_len
    assert p.dtype == np.int64 and p.min() >= lo
    if hi is not None:
        assert p.max() <= hi
    if mean is not None:
        assert p.mean() == pytest.approx(mean, rel=0.03)


def test_streams_are_independent():
    a = build_workload(scenario(seed=3))
    b = build_workload(scenario(seed=3, workload__output_len={"dist": "fixed", "value": 9}))
    np.testing.assert_array_equal(a.arrival, b.arrival)
    np.testing.assert_array_equal(a.prompt_len, b.prompt_len)


def make_trace(path, n=50, rate=5.0, seed=1):
    r = np.random.default_rng(seed)
    t0 = np.datetime64("2023-11-16T18:15:46.680590")
    offs = np.cumsum(r.exponential(1 / rate, n))
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for o, c, g in zip(offs, r.integers(10, 900, n), r.integers(1, 300, n), strict=False):
        ts = str(t0 + np.timedelta64(int(o * 1e6), "us")).replace("T", " ")
        lines.append(f"{ts}0,{c},{g}")
    path.write_text("\n".join(lines) + "\n")
    return offs - offs[0]


def test_trace_replay_and_rescaling(tmp_path):
    offs = make_trace(tmp_path / "t.csv")
    tr = read_azure_trace(tmp_path / "t.csv")
    np.testing.assert_allclose(tr.arrival, offs, atol=2e-6)
    slow = rescale_times(tr.arrival, time_scale=2.0)
    np.testing.assert_allclose(slow, 2 * tr.arrival)
    fast = rescale_times(tr.arrival, rate=100.0)
    assert (len(fast) - 1) / fast[-1] == pytest.approx(100.0)
    s = scenario(workload={"trace": {"path": str(tmp_path / "t.csv"), "rate": 20.0}})
    w = build_workload(s)
    assert len(w) == 50
    np.testing.assert_array_equal(w.prompt_len, tr.prompt_len)


def test_empirical_lengths_come_from_the_trace(tmp_path):
    make_trace(tmp_path / "t.csv")
    tr = read_azure_trace(tmp_path / "t.csv")
    w = build_workload(scenario(workload__prompt_len={
        "dist": "empirical", "path": str(tmp_path / "t.csv"), "column": "ContextTokens"}))
    assert set(w.prompt_len) <= set(tr.prompt_len)


def test_azure_conversation_trace(azure_trace):
    tr = read_azure_trace(azure_trace)
    assert 19_000 < len(tr) < 20_000
    assert 3000 < tr.arrival[-1] <= 3600  # one hour of traffic
    assert (np.diff(tr.arrival) >= 0).all()


def test_rate_scale_compresses_every_class():
    from sim.scenario.load import load_scenario
    from tests.conftest import REPO

    path = REPO / "scenarios" / "multi-class.yaml"
    a = build_workload(load_scenario(path))
    b = build_workload(load_scenario(path, ["workload.rate_scale=2"]))
    np.testing.assert_allclose(b.arrival, a.arrival / 2)
    np.testing.assert_array_equal(a.class_id, b.class_id)
