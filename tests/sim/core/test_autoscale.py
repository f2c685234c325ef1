"""Autoscaling (sim/core/autoscale.py): the fleet grows under load and only after provisioning,
routes only to active replicas, drains before it stops, stabilises as HPA does; its GPU-hours
and cost are what it held; what it cannot be is refused by name."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.core.state import cold_start_s
from sim.errors import InputError
from sim.loops.run import simulate
from sim.pricing.power import IDLE
from sim.results.energy import run_energy, scenario_power
from sim.results.fleet import held_gpu_hours, held_intervals, replicas_over_time, slo_between_changes
from sim.results.money import run_costs
from sim.scenario.load import load_scenario
from tests.sim.helpers import scenario
from tests.sim.loops.test_loops_agree import AUTOSCALE

QUEUE = AUTOSCALE["autoscale-queue"]
TWO_SPIKES = AUTOSCALE["autoscale-cancel-and-reactivate-power-of-two"]


def run(case: dict, **autoscale):
    return simulate(scenario(**{**case, "autoscale": {**case["autoscale"], **autoscale}}))


def stretches(fleet: pd.DataFrame):
    """(replica, state, from, to) for each state a replica was in."""
    out = []
    for r, rows in fleet.groupby("replica"):
        t, s = rows["time"].to_numpy(), rows["state"].astype(str).to_numpy()
        out += [(r, s[i], t[i], t[i + 1] if i + 1 < len(t) else np.inf) for i in range(len(t))]
    return out


def test_the_fleet_grows_under_load_and_routes_only_to_active_replicas():
    r = run(QUEUE)
    a = r.summary["autoscale"]
    assert a["max_active"] == 4 and a["min_active"] == 1
    assert r.requests["replica"].nunique() == 4
    active = [(rep, lo, hi) for rep, s, lo, hi in stretches(r.fleet) if s == "active"]
    for rep, t in zip(r.requests["replica"], r.requests["arrival"], strict=True):
        assert any(rep == x and lo <= t <= hi for x, lo, hi in active), (rep, t)


def test_a_new_replica_serves_after_provisioning_and_its_cold_start():
    r = run(QUEUE, provisioning_s=0.7, cold_start_s=1.3)
    for rep, s, lo, hi in stretches(r.fleet):
        if s == "provisioning" and hi < np.inf:
            after = r.fleet[(r.fleet["replica"] == rep) & (r.fleet["time"] == hi)]["state"].astype(str).tolist()
            assert after == ["active"] and hi - lo == pytest.approx(2.0)


def test_the_cold_start_is_the_weights_over_the_load_bandwidth_unless_given():
    s = scenario(autoscale={"max_replicas": 2, "load_bandwidth_gbps": 2.0})
    assert cold_start_s(s) == pytest.approx(s.memory.weight_bytes / 2e9)
    assert 7 < cold_start_s(s) < 9  # Llama-3-8B: 16 GB of bf16 weights at 2 GB/s
    assert cold_start_s(scenario(autoscale={"max_replicas": 2, "cold_start_s": 42})) == 42


def test_a_draining_replica_takes_nothing_new_finishes_what_it_holds_then_stops():
    r = run(QUEUE)
    drained = 0
    for rep, s, lo, hi in stretches(r.fleet):
        if s != "draining":
            continue
        mine = r.requests[r.requests["replica"] == rep]
        assert not ((mine["arrival"] > lo) & (mine["arrival"] < hi)).any()  # nothing new
        if hi < np.inf:
            drained += 1
            held = mine[mine["arrival"] <= lo]
            assert (held["completion"] <= hi + 1e-12).all()  # it finished what it held before it stopped
            assert hi == pytest.approx(max(lo, held["completion"].max()))  # and stopped then
    assert drained >= 1


def test_a_starting_replica_is_cancelled_and_a_draining_one_serves_again():
    r = simulate(scenario(**TWO_SPIKES))
    seen = {(s, nxt) for (rep, s, lo, hi), (rep2, nxt, *_) in zip(stretches(r.fleet), stretches(r.fleet)[1:],
                                                                 strict=False) if rep == rep2}
    assert ("provisioning", "off") in seen and ("draining", "active") in seen


def test_scale_down_waits_for_the_stabilisation_window():
    assert "draining" in set(run(QUEUE, scale_down_stabilization_s=0.0).fleet["state"].astype(str))
    assert "draining" not in set(run(QUEUE, scale_down_stabilization_s=1000.0).fleet["state"].astype(str))


def test_the_sla_planner_sizes_the_fleet_from_its_capacity_model():
    case = AUTOSCALE["autoscale-sla-trend-prefix-affinity"]
    tight = run(case, target=0.2)
    loose = run(case, target=1.0)
    assert tight.summary["autoscale"]["gpu_hours"] > loose.summary["autoscale"]["gpu_hours"]


def test_gpu_hours_count_provisioning_active_and_draining_time_within_the_window():
    log = pd.DataFrame({"time": [0.0, 10.0, 20.0, 50.0, 60.0], "replica": [0, 1, 1, 1, 1],
                        "state": pd.Categorical.from_codes([2, 1, 2, 3, 0], ["off", "provisioning", "active",
                                                                              "draining"])})
    assert held_intervals(log, 100.0) == [(0, 0.0, 100.0), (1, 10.0, 60.0)]
    assert held_gpu_hours(log, 2, 0.0, 100.0) == pytest.approx((100 + 50) * 2 / 3600)
    assert held_gpu_hours(log, 1, 30.0, 55.0) == pytest.approx((25 + 25) / 3600)  # clipped to the window
    series = replicas_over_time(log, 2)
    assert series["active"].tolist() == [1, 1, 2, 1, 1] and series["held"].tolist() == [1, 2, 2, 2, 1]


def test_the_cost_is_the_price_of_the_gpu_hours_held():
    r = run(QUEUE)
    s, held = r.summary, r.summary["autoscale"]["gpu_hours"]
    fixed = run_costs(r.scenario, s)  # every replica for the whole window
    assert s["gpu_hours"] == held < fixed["gpu_hours"]
    assert s["cost_per_1m_tokens"] == pytest.approx(fixed["cost_per_1m_tokens"] * held / fixed["gpu_hours"])
    mean_gpus = held / (s["arrival_span_s"] / 3600)  # held over the cost window, on average
    assert s["goodput_per_gpu"] == pytest.approx(s["goodput"] / mean_gpus)  # per GPU held on average


def test_an_autoscaled_fleet_draws_idle_power_only_while_a_replica_is_held():
    r = run(QUEUE)
    s, power = r.summary, scenario_power(r.scenario)
    block = np.full(len(power.gpus), float(r.scenario.scheduler.block_size))
    every = run_energy(power, r.steps.copy(), r.requests.copy(), s, block)  # every replica over the window
    not_held = s["arrival_span_s"] * r.scenario.num_gpus - s["gpu_hours"] * 3600  # GPU-seconds not held
    idle_w = power.power[0, IDLE]
    assert not_held > 0
    assert (every["energy_kwh"] - s["energy_kwh"]) * 3.6e6 == pytest.approx(not_held * idle_w)


def test_the_results_hold_the_fleet_its_chart_and_its_summary(tmp_path):
    from sim.results.summary_view import summary_blocks
    from sim.results.write import write_results

    r = run(QUEUE)
    paths = write_results(r, tmp_path / "out", "csv")
    fleet = pd.read_csv(paths["fleet"])
    assert fleet["state"].tolist() == r.fleet["state"].astype(str).tolist()
    assert "Replicas over time" in paths["report"].read_text()
    titles = [b.title for b in summary_blocks(r)[1]]
    assert "Autoscaling" in titles and any(t.startswith("SLO between scale changes") for t in titles)
    fixed = simulate(scenario(replicas=2))
    assert "fleet" not in write_results(fixed, tmp_path / "out", "csv")  # a fixed fleet's run: no fleet file
    assert not (tmp_path / "out" / "fleet.csv").exists()


def test_slo_attainment_is_given_between_changes_of_the_active_count():
    series = pd.DataFrame({"time": [0.0, 5.0, 7.0, 9.0], "active": [1, 3, 3, 1]})
    requests = pd.DataFrame({"arrival": [1.0, 2.0, 6.0, 8.0, 9.5], "slo_met": [True, False, True, True, False]})
    out = slo_between_changes(requests, series)
    assert [(x["start_s"], x["active"], x["requests"]) for x in out] == [(0.0, 1, 2), (5.0, 3, 2), (9.0, 1, 1)]
    assert [x["slo_attainment"] for x in out] == [0.5, 1.0, 0.0]
    assert out[-1]["end_s"] == 9.5 and not math.isinf(out[-1]["end_s"])


@pytest.mark.parametrize("fields, where", [
    ({"autoscale": {"min_replicas": 3, "max_replicas": 2}}, "autoscale"),
    ({"autoscale": {"max_replicas": 2, "initial_replicas": 3}}, "autoscale"),
    ({"autoscale": {"max_replicas": 2, "policy": "kv", "target": 2}}, "autoscale"),
    ({"autoscale": {"max_replicas": 2}, "replicas": 2}, "replicas"),
    ({"autoscale": {"max_replicas": 2}, "replica_groups": [{"count": 2}]}, "autoscale"),
    ({"autoscale": {"max_replicas": 2}, "disaggregation": {}}, "autoscale"),
    ({"autoscale": {"max_replicas": 2}, "workload__arrival": {"process": "closed", "concurrency": 4}},
     "workload.arrival.process"),
    ({"autoscale": {"max_replicas": 2, "policy": "hpa"}}, "autoscale.policy"),
])
def test_what_autoscaling_cannot_be_is_refused_by_name(fields, where):
    with pytest.raises(InputError) as e:
        scenario(**fields)
    assert e.value.field == where


def test_a_refusal_names_the_file_and_exits_2(tmp_path):
    from sim.cli.app import main

    path = tmp_path / "bad.yaml"
    path.write_text("autoscale: {min_replicas: 3, max_replicas: 2}\n")
    with pytest.raises(InputError, match=r"bad\.yaml"):
        load_scenario(path)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2


def test_the_capacity_model_sustains_less_under_a_tighter_slo_and_more_on_a_faster_gpu():
    from sim.pricing import make_cost_model
    from sim.pricing.capacity import replica_rate

    def rate(**fields):
        s = scenario(**fields)
        return replica_rate(s, make_cost_model(s), 600, 200)

    free, tight = rate(), rate(slo={"tpot_s": 0.012})
    assert 0 < tight < free
    assert rate(hardware={"gpu": "L4"}) < free
    assert rate(scheduler={"max_num_seqs": 4}) < free  # the batch is bounded by the engine's seats
