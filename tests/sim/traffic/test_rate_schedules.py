"""Arrival rates that change over time: the realised rate follows the schedule (within
Poisson bounds for a fixed seed), schedules are validated with messages that say what to
write, traces are sliced and looped, and duration_s / num_requests both bound the arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.traffic import build_workload
from sim.traffic.arrivals import arrival_times
from sim.traffic.rates import rate_curve
from sim.traffic.schema import RateSchedule
from tests.sim.helpers import scenario


def schedule(**fields) -> RateSchedule:
    return RateSchedule.model_validate(fields)


def counts(t: np.ndarray, edges) -> np.ndarray:
    return np.histogram(t, edges)[0]


def within(count: int, expected: float, cv: float = 1.0) -> bool:
    """A count within 4.5 standard deviations of its expectation (a Poisson count's variance is
    its mean; a renewal process with gap CV c has about c² times that)."""
    return abs(count - expected) <= 4.5 * cv * np.sqrt(expected) + 1


def test_piecewise_segments_realise_each_rate():
    s = schedule(segments=[{"duration_s": 100, "rate": 5}, {"duration_s": 100, "rate": 40},
                           {"duration_s": 100, "rate": 0}, {"duration_s": 100, "rate": 10}])
    t = arrival_times("poisson", s, np.random.default_rng(7), num_requests=None, duration_s=400)
    got = counts(t, [0, 100, 200, 300, 400])
    assert got[2] == 0  # a rate of 0 sends nothing
    for c, rate in zip(got, (5, 40, 0, 10), strict=True):
        assert within(c, rate * 100), (got, rate)


def test_linear_ramp_rises_as_its_integral_says():
    s = schedule(segments=[{"duration_s": 200, "rate": 0, "ramp_to": 40}])
    t = arrival_times("poisson", s, np.random.default_rng(3), num_requests=None, duration_s=200)
    first, second = counts(t, [0, 100, 200])
    assert within(first, 0.5 * 100 * 20) and within(second, 100 * 20 + 0.5 * 100 * 20)  # 1000, 3000


def test_last_segment_rate_holds_on():
    s = schedule(segments=[{"duration_s": 10, "rate": 10}, {"duration_s": 10, "rate": 30}])
    t = arrival_times("poisson", s, np.random.default_rng(0), num_requests=None, duration_s=120)
    assert within(counts(t, [20, 120])[0], 30 * 100)


def test_diurnal_peaks_and_troughs_where_the_phase_puts_them():
    d = {"mean": 20, "amplitude": 15, "period_s": 400, "phase_s": 100}
    t = arrival_times("poisson", schedule(diurnal=d), np.random.default_rng(1), num_requests=None,
                      duration_s=1200)
    curve = rate_curve(schedule(diurnal=d))
    # the quarter-periods around the peak (t = 100) and the trough (t = 300), three periods over
    edges = np.array([50, 150, 250, 350])
    for k in range(3):
        e = edges + 400 * k
        peak, _, trough = counts(t, e)
        assert within(peak, float(np.diff(curve.cumulative(e[:2]))[0]))
        assert within(trough, float(np.diff(curve.cumulative(e[2:]))[0]))
        assert peak > 3 * trough
    # the exact integral of the cosine over the peak quarter: 20·100 + 15·400/π·sin(π/4)
    exact = 20 * 100 + 15 * 400 / np.pi * np.sin(np.pi / 4)
    assert np.diff(curve.cumulative(np.array([50.0, 150.0])))[0] == pytest.approx(exact, rel=1e-4)


@pytest.mark.parametrize("process,cv", [("poisson", 1.0), ("gamma", 2.0), ("constant", 1.0)])
def test_a_burst_multiplies_the_rate_for_its_window(process, cv):
    s = schedule(base=10, bursts=["x3 for 50 s at 100 s"])
    t = arrival_times(process, s, np.random.default_rng(11), num_requests=None, duration_s=300, cv=cv)
    before, inside, after = counts(t, [0, 100, 150, 300])
    assert within(before, 1000, cv) and within(inside, 1500, cv) and within(after, 1500, cv)
    assert inside / 50 > 2.5 * before / 100


def test_the_time_change_inverts_the_integral():
    s = schedule(segments=[{"duration_s": 30, "rate": 2, "ramp_to": 9}, {"duration_s": 20, "rate": 0},
                           {"duration_s": 50, "rate": 4}], bursts=[{"factor": 2.5, "duration_s": 15, "at_s": 60}])
    curve = rate_curve(s)
    t = np.array([0.0, 1.5, 29.9, 55.0, 60.0, 70.0, 99.0, 180.0])
    positive = curve.rate(t) > 0
    assert np.allclose(curve.inverse(curve.cumulative(t[positive])), t[positive])
    assert curve.rate(np.array([65.0]))[0] == pytest.approx(10.0)  # 4 req/s × 2.5 inside the burst


def test_same_seed_same_arrivals_and_num_requests_exact():
    sc = scenario(workload__arrival={"process": "gamma", "cv": 1.5,
                                     "rate": {"base": 20, "bursts": [{"factor": 2, "duration_s": 5, "at_s": 3}]}})
    a, b = build_workload(sc).arrival, build_workload(sc).arrival
    assert len(a) == 200 and np.array_equal(a, b)
    other = build_workload(scenario(seed=1, workload__arrival=sc.workload.arrival.model_dump())).arrival
    assert not np.array_equal(a, other)


def test_rate_scale_scales_the_schedule_and_its_bursts():
    sc = scenario(workload__rate_scale=2.0,
                  workload__arrival={"process": "poisson", "rate": {"base": 10, "bursts": ["x2 for 10 s at 20 s"]}})
    w = build_workload(sc)
    assert w.bursts == ((10.0, 15.0, 2.0),)


@pytest.mark.parametrize("rate,fragment", [
    ({"base": 10, "bursts": ["x2 for 60 s at 10 s", "x2 for 5 s at 30 s"]}, "bursts overlap"),
    ({"diurnal": {"mean": 5, "amplitude": 6}}, "amplitude (6) must be ≤ mean (5)"),
    ({"base": 10, "bursts": ["double for a minute"]}, "expected a burst like 'x2 for 60 s at 120 s'"),
    ({"segments": [{"duration_s": 10, "rate": 0}]}, "every rate is 0"),
    ({"base": 10, "diurnal": {"mean": 5, "amplitude": 1}}, "exactly one of base"),
    ({"bursts": ["x2 for 1 s at 1 s"]}, "exactly one of base"),
])
def test_bad_schedules_say_what_to_write(rate, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(workload__arrival={"process": "poisson", "rate": rate})
    assert fragment in str(e.value) and "workload.arrival.rate" in str(e.value)


@pytest.mark.parametrize("arrival,fragment", [
    ({"rate": 4}, "(got no 'process')"),
    ({"process": "posson", "rate": 4}, "(got process: 'posson')"),
    (4, "(got 4)"),
])
def test_an_arrival_block_without_a_known_process_says_what_to_write(arrival, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(workload__arrival=arrival)
    msg = str(e.value)
    assert "expected process: one of poisson, gamma, constant, trace, closed" in msg
    assert "{process: poisson, rate: 4}" in msg and msg.count(fragment) == 1
    assert "discriminator" not in msg


def test_duration_alone_is_not_cut_by_the_default_num_requests():
    w = build_workload(scenario_from({"duration_s": 60, "arrival": {"process": "poisson", "rate": 40}}))
    assert within(len(w), 2400) and len(w) > 1000
    assert w.ended_by["by"] == "duration_s" and "num_requests" not in w.ended_by


def test_duration_and_num_requests_the_first_reached_ends_arrivals():
    w = build_workload(scenario_from({"duration_s": 60, "num_requests": 100,
                                      "arrival": {"process": "poisson", "rate": 10}}))
    assert len(w) == 100 and w.ended_by == {"by": "num_requests", "last_arrival_s": float(w.arrival[-1]),
                                            "num_requests": 100, "duration_s": 60}
    w = build_workload(scenario_from({"duration_s": 5, "num_requests": 1000,
                                      "arrival": {"process": "poisson", "rate": 10}}))
    assert len(w) < 1000 and w.arrival[-1] < 5 and w.ended_by["by"] == "duration_s"


def scenario_from(workload: dict):
    from sim.scenario.load import scenario_from_dict

    return scenario_from_dict({"name": "t", "workload": workload}, "<test>")


def write_trace(tmp_path, times) -> str:
    path = tmp_path / "t.csv"
    path.write_text("t,p,o\n" + "".join(f"{x},100,10\n" for x in times))
    return str(path)


def test_an_arrival_trace_is_sliced_scaled_and_looped(tmp_path):
    path = write_trace(tmp_path, [0, 1, 2, 3, 4, 5, 6, 7])
    arrival = {"process": "trace", "path": path, "format": "csv", "columns": {"arrival": "t", "prompt_len": "p",
               "output_len": "o"}, "start_s": 2, "duration_s": 3, "time_scale": 2.0, "loop": True}
    w = build_workload(scenario_from({"num_requests": 7, "arrival": arrival}))
    # the slice 2, 3, 4 → 0, 2, 4 s; each copy one mean gap (2 s) after the last: a 6 s period
    assert w.arrival.tolist() == [0, 2, 4, 6, 8, 10, 12]


def test_a_whole_trace_loops_until_the_duration(tmp_path):
    path = write_trace(tmp_path, [0, 1, 3])
    trace = {"path": path, "format": "csv", "columns": {"arrival": "t", "prompt_len": "p", "output_len": "o"},
             "loop": True}
    w = build_workload(scenario_from({"duration_s": 9, "trace": trace}))
    assert w.arrival.tolist() == [0, 1, 3, 4.5, 5.5, 7.5]
    with pytest.raises(ScenarioError, match=r"trace\.loop replays the trace without end"):
        scenario_from({"trace": trace})


@pytest.mark.parametrize("rate,fragment", [(-1, "greater than 0 (requests/s), or a schedule such as {base: 10"),
                                           ("fast", "valid number (requests/s), or a schedule"),
                                           (True, "expected a number, got true")])
def test_a_bad_plain_rate_says_what_to_write(rate, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(workload__arrival={"process": "poisson", "rate": rate})
    assert "workload.arrival.rate: " in str(e.value) and fragment in str(e.value)

