"""The compiled loop gives exactly the results of the SimPy loop, or hands the scenario back."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import ScenarioError
from sim.loops.run import simulate
from tests.sim.helpers import scenario, write_profile

PRESSURE = {"hardware__memory_utilization": 0.235,
            "workload__arrival": {"process": "poisson", "rate": 40},
            "workload__output_len": {"dist": "uniform", "min": 100, "max": 700}}
BURSTY = {"workload__arrival": {"process": "gamma", "rate": 15, "cv": 3.0}}
LOADS = {"light": {}, "pressure": PRESSURE, "bursty": BURSTY}


def both_loops(**fields):
    reference = simulate(scenario(simulation={"loop": "simpy"}, **fields))
    compiled = simulate(scenario(simulation={"loop": "compiled"}, **fields))
    assert reference.loop == "simpy" and compiled.loop == "compiled"
    return reference, compiled


def assert_identical(reference, compiled):
    assert reference.warnings == compiled.warnings
    pd.testing.assert_frame_equal(reference.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(reference.steps, compiled.steps, check_exact=True)
    assert reference.summary.keys() == compiled.summary.keys()
    for key, value in reference.summary.items():  # NaN equals NaN here (no TPOT for 1-token outputs)
        other = compiled.summary[key]
        assert value == other or (value != value and other != other), key


@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill"])
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("replicas", [1, 3])
def test_compiled_loop_is_identical_to_simpy(policy, load, replicas):
    reference, compiled = both_loops(scheduler__policy=policy, replicas=replicas, **LOADS[load])
    assert_identical(reference, compiled)
    if load == "pressure":
        assert compiled.summary["preemptions"] > 0
    assert compiled.events == compiled.summary["steps"]


CASES = {
    "least-outstanding": {"replicas": 3, "router": {"policy": "least-outstanding"}, **PRESSURE},
    "least-kv-chunked": {"replicas": 3, "router": {"policy": "least-kv"},
                         "scheduler__policy": "chunked-prefill", **BURSTY},
    "heterogeneous": {"replica_groups": [
        {"count": 1, "hardware": {"gpu": "A100-80GB"}},
        {"count": 2, "hardware": {"gpu": "H200", "tp": 2},
         "scheduler": {"policy": "chunked-prefill", "chunk_size": 256}}],
        "router": {"policy": "least-outstanding"}, **PRESSURE},
    "tensor-parallel-fp8": {"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 4},
                            "quantization": {"weights": "fp8", "kv_cache": "fp8"}, **BURSTY},
    # A burst: everyone arrives within a step, ties between arrivals and wake-ups.
    "burst": {"workload__num_requests": 60, "workload__arrival": {"process": "constant", "rate": 5000}},
    # prompt = chunk + 1: the last prompt token looks like a decode and samples the first token.
    "chunk-plus-one": {"scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 256,
                       "scheduler__max_num_seqs": 64, "workload__prompt_len": {"dist": "fixed", "value": 257},
                       "workload__arrival": {"process": "poisson", "rate": 2}},
    # Requests that can never run are rejected, for each reason.
    "batch-tokens": {"scheduler__max_batched_tokens": 512,
                     "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 900}, **PRESSURE},
    "kv-capacity": {"hardware__kv_blocks": 30, "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 900}},
    "too-long": {"workload__prompt_len": {"dist": "uniform", "min": 4000, "max": 9000},
                 "workload__num_requests": 40},
    "few-seats": {"scheduler__max_num_seqs": 4, "scheduler__watermark": 0.2, **PRESSURE},
    "classes": {"workload": {"num_requests": 200, "classes": [
        {"name": "chat", "slo": {"ttft_s": 0.5}, "arrival": {"process": "poisson", "rate": 14},
         "prompt_len": {"dist": "uniform", "min": 16, "max": 300},
         "output_len": {"dist": "uniform", "min": 1, "max": 100}},
        {"name": "batch", "arrival": {"process": "poisson", "rate": 6},
         "prompt_len": {"dist": "uniform", "min": 500, "max": 2000},
         "output_len": {"dist": "uniform", "min": 50, "max": 300}}]}},
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_compiled_loop_is_identical_in_harder_cases(case):
    reference, compiled = both_loops(**CASES[case])
    assert_identical(reference, compiled)


SHIPPED_PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "profiles" / "a100-llama-2-70b-tp2.json"
PROFILES = {  # profile settings, scenario fields
    "ops": ({}, PRESSURE),
    "ops-chunked": ({}, {"scheduler__policy": "chunked-prefill", **BURSTY}),
    "step-fit": ({"mode": "step"}, PRESSURE),
    "step-fit-chunked": ({"mode": "step", "reach": 300}, {"scheduler__policy": "chunked-prefill", **PRESSURE}),
    "ops-tp2-heterogeneous": ({"tp": 2}, {"replica_groups": [
        {"count": 1, "hardware": {"gpu": "A100-80GB", "tp": 2}},
        {"count": 2, "hardware": {"gpu": "H200", "tp": 2}, "scheduler": {"policy": "chunked-prefill"}}],
        "router": {"policy": "least-kv"}, **BURSTY}),
    # Only the linear table: every other term is the roofline's.
    "linear-only-tp2": ({"tables": (), "fits": (), "tp": 2}, {"hardware": {"gpu": "H100-SXM", "tp": 2}, **PRESSURE}),
    "tables-no-fits": ({"fits": ()}, {"replicas": 2, **BURSTY}),
    "fits-no-tables": ({"tables": ()}, {"scheduler__policy": "chunked-prefill", **PRESSURE}),
    "wide-range": ({"reach": 100_000}, PRESSURE),
}


@pytest.mark.parametrize("case", PROFILES, ids=str)
def test_compiled_loop_prices_profiles_as_simpy_does(case, tmp_path):
    settings_, fields = PROFILES[case]
    path = write_profile(tmp_path / "p.json", **settings_)
    reference, compiled = both_loops(cost={"model": "profile", "profile": path}, **fields)
    assert_identical(reference, compiled)
    extrapolated = [w for w in compiled.warnings if "extrapolated" in w]
    assert bool(extrapolated) == (case != "wide-range"), compiled.warnings


def test_compiled_loop_prices_the_shipped_vidur_profile():
    reference, compiled = both_loops(model="llama-2-70b", hardware={"gpu": "A100-80GB", "tp": 2},
                                     cost={"model": "profile", "profile": str(SHIPPED_PROFILE)},
                                     scheduler__policy="chunked-prefill", **BURSTY)
    assert_identical(reference, compiled)
    roofline = simulate(scenario(model="llama-2-70b", hardware={"gpu": "A100-80GB", "tp": 2},
                                 scheduler__policy="chunked-prefill", **BURSTY))
    assert roofline.steps["duration"].sum() != compiled.steps["duration"].sum()  # the profile priced it


def test_rejection_reasons_are_all_exercised():
    reasons = set()
    for case in ("batch-tokens", "kv-capacity", "too-long"):
        _, compiled = both_loops(**CASES[case])
        reasons |= set(compiled.requests["reject_reason"]) - {""}
    assert len(reasons) == 3, reasons


@pytest.mark.parametrize("fields, why", [
    ({"scheduler__policy": "static"}, "static"),
    ({"scheduler__prefix_caching": True}, "prefix_caching"),
    ({"scheduler__preemption": "swap"}, "swap"),
    ({"router": {"policy": "power-of-two"}, "replicas": 2}, "power-of-two"),
    ({"disaggregation": {"prefill": {"count": 1}, "decode": {"count": 1}}}, "disaggregated"),
    ({"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 2, "pp": 2}}, "pp"),
])
def test_what_the_compiled_loop_cannot_run_goes_to_simpy(fields, why):
    assert simulate(scenario(workload__num_requests=20, **fields)).loop == "simpy"  # auto
    with pytest.raises(ScenarioError, match=why) as err:
        simulate(scenario(workload__num_requests=20, simulation={"loop": "compiled"}, **fields))
    assert err.value.field == "simulation.loop"


def test_auto_picks_the_compiled_loop_and_is_deterministic():
    a = simulate(scenario(**PRESSURE))
    b = simulate(scenario(**PRESSURE))
    assert a.loop == "compiled"
    assert_identical(a, b)


@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill"])
@pytest.mark.parametrize("priorities", [(0, 1), (5, -2), (1, 1)])
def test_classes_with_priorities_are_served_as_simpy_serves_them(policy, priorities):
    classes = [dict(c, priority=p) for c, p in zip(CASES["classes"]["workload"]["classes"], priorities,
                                                    strict=True)]
    classes.append({**classes[0], "name": "bulk", "priority": 3})
    fields = {"workload": {"num_requests": 400, "classes": classes}, "scheduler__policy": policy,
              "replicas": 2, "router": {"policy": "least-outstanding"},
              **{k: v for k, v in PRESSURE.items() if k.startswith("hardware")}}
    reference, compiled = both_loops(**fields)
    assert_identical(reference, compiled)
    if policy == "continuous":  # the queue is busy enough for its order to matter
        assert compiled.summary["preemptions"] > 0
        r = compiled.requests
        waits = (r["first_scheduled"] - r["arrival"]).groupby(r["class"]).mean()
        if priorities[0] < priorities[1]:
            assert waits["chat"] < waits["batch"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("profiles")
    return {mode: write_profile(folder / f"{mode}.json", mode=mode, reach=reach)
            for mode, reach in (("ops", 512), ("step", 256))}


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["continuous", "chunked-prefill"]),
       cost=st.sampled_from(["roofline", "roofline", "ops", "step"]),
       replicas=st.integers(1, 3),
       router=st.sampled_from(["round-robin", "least-outstanding", "least-kv"]),
       memory=st.sampled_from([0.23, 0.25, 0.3, 0.9]),
       max_num_seqs=st.sampled_from([2, 8, 64, 256]),
       block_size=st.sampled_from([8, 16, 32]),
       watermark=st.sampled_from([0.0, 0.01, 0.1]),
       rate=st.sampled_from([2.0, 20.0, 80.0]),
       max_prompt=st.integers(20, 3000),
       max_output=st.integers(1, 800),
       seed=st.integers(0, 1000))
def test_compiled_loop_matches_simpy_on_random_scenarios(profiles, policy, cost, replicas, router, memory,
                                                         max_num_seqs, block_size, watermark, rate,
                                                         max_prompt, max_output, seed):
    fields = {"cost": {"model": "profile", "profile": profiles[cost]}} if cost != "roofline" else {}
    fields.update(seed=seed, replicas=replicas, router={"policy": router},
                  hardware__memory_utilization=memory,
                  scheduler__policy=policy, scheduler__max_num_seqs=max_num_seqs,
                  scheduler__chunk_size=max(512, max_num_seqs), scheduler__block_size=block_size,
                  scheduler__watermark=watermark, workload__num_requests=80,
                  workload__arrival={"process": "poisson", "rate": rate},
                  workload__prompt_len={"dist": "uniform", "min": 1, "max": max_prompt},
                  workload__output_len={"dist": "uniform", "min": 1, "max": max_output})
    assert_identical(*both_loops(**fields))
