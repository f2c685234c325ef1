"""Fast-forwarding decode runs gives exactly the results of stepping one by one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.loops.run import simulate
from tests.sim.helpers import scenario, write_profile

PRESSURE = {"hardware__memory_utilization": 0.235,
            "workload__arrival": {"process": "poisson", "rate": 40},
            "workload__output_len": {"dist": "uniform", "min": 100, "max": 700}}
BURSTY = {"workload__arrival": {"process": "gamma", "rate": 15, "cv": 3.0}}


def both_ways(**fields):
    stepped = simulate(scenario(simulation={"fast_forward": False, "loop": "simpy"}, **fields))
    jumped = simulate(scenario(simulation={"fast_forward": True, "loop": "simpy"}, **fields))
    return stepped, jumped


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked-prefill"])
@pytest.mark.parametrize("load", ["light", "pressure", "bursty"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_fast_forward_is_identical_to_stepping(policy, load, replicas):
    extra = {"light": {}, "pressure": PRESSURE, "bursty": BURSTY}[load]
    stepped, jumped = both_ways(scheduler__policy=policy, replicas=replicas, **extra)
    pd.testing.assert_frame_equal(stepped.requests, jumped.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.steps, jumped.steps, check_exact=True)
    if load == "pressure" and policy != "static":
        assert stepped.summary["preemptions"] > 0
    # ... and the jump actually saves events: far fewer waits than steps.
    assert jumped.summary["steps"] == stepped.summary["steps"] == stepped.events
    assert jumped.events < stepped.events / 2


def test_runs_go_on_through_completions_when_nobody_waits():
    # One burst of requests, then nothing: once all are prefilled, the batch decodes to the
    # end in a single run, however many finish along the way.
    stepped, jumped = both_ways(workload__num_requests=12,
                                workload__arrival={"process": "constant", "rate": 1000})
    pd.testing.assert_frame_equal(stepped.requests, jumped.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.steps, jumped.steps, check_exact=True)
    assert jumped.requests["completion"].nunique() > 5
    prefill_steps = int((jumped.steps["prefill_tokens"] > 0).sum())
    assert jumped.events == prefill_steps + 1


def test_fast_forward_handles_chunked_prompts_ending_in_a_single_token():
    # prompt = chunk + 1: the last prefill token looks like a decode and samples the first token
    stepped, jumped = both_ways(scheduler__policy="chunked-prefill", scheduler__chunk_size=256,
                                scheduler__max_num_seqs=64,
                                workload__prompt_len={"dist": "fixed", "value": 257},
                                workload__arrival={"process": "poisson", "rate": 2})
    pd.testing.assert_frame_equal(stepped.requests, jumped.requests, check_exact=True)


PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "profiles" / "a100-llama-2-70b-tp2.json"

CLUSTER_CASES = {
    "profiled-cost": {"model": "llama-2-70b", "hardware": {"gpu": "A100-80GB", "tp": 2},
                      "cost": {"model": "profile", "profile": str(PROFILE)}, **BURSTY},
    "least-kv-router": {"replicas": 3, "router": {"policy": "least-kv"}, **BURSTY},
    "least-outstanding": {"replicas": 2, "router": {"policy": "least-outstanding"}, **PRESSURE},
    "disaggregated": {"disaggregation": {"prefill": {"count": 1}, "decode": {"count": 2}}, **BURSTY},
    "swap": {"scheduler__preemption": "swap", **PRESSURE},
    "prefix-caching": {"scheduler__prefix_caching": True, **PRESSURE,
                       "workload__shared_prefix": {"num_prompts": 6, "length": 400}},
    "prefix-caching-chunked": {"scheduler__prefix_caching": True, "scheduler__policy": "chunked-prefill",
                               **PRESSURE, "workload__shared_prefix": {"num_prompts": 6, "length": 400}},
    "heterogeneous": {"replica_groups": [{"count": 1, "hardware": {"gpu": "A100-80GB"}},
                                         {"count": 1, "hardware": {"gpu": "H200"}}],
                      "router": {"policy": "power-of-two"}, **BURSTY},
}


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=str)
def test_fast_forward_is_identical_in_cluster_runs(case):
    stepped, jumped = both_ways(**CLUSTER_CASES[case])
    pd.testing.assert_frame_equal(stepped.requests, jumped.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.steps, jumped.steps, check_exact=True)


@pytest.mark.parametrize("mode", ["ops", "step"])
def test_a_cut_short_run_counts_only_the_steps_it_ran(mode, tmp_path):
    """A profile's extrapolation warnings count steps run, not the priced tail of a run an
    arrival cut short."""
    path = write_profile(tmp_path / "p.json", mode=mode)
    stepped, jumped = both_ways(cost={"model": "profile", "profile": path}, **PRESSURE)
    pd.testing.assert_frame_equal(stepped.steps, jumped.steps, check_exact=True)
    assert any("extrapolated" in w for w in stepped.warnings)
    assert stepped.warnings == jumped.warnings


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked-prefill"])
def test_fast_forward_with_priorities_is_identical_to_stepping(policy):
    """A newcomer with a higher priority than everyone waiting heads the queue and may fit
    where the blocked head did not: it cuts a decode run short like any joiner."""
    def klass(name, priority, rate, prompt):
        return {"name": name, "priority": priority, "arrival": {"process": "poisson", "rate": rate},
                "prompt_len": {"dist": "uniform", "min": 16, "max": prompt},
                "output_len": {"dist": "uniform", "min": 50, "max": 500}}
    classes = [klass("chat", 0, 12, 300), klass("batch", 2, 8, 2000), klass("bulk", 1, 6, 1200)]
    stepped, jumped = both_ways(scheduler__policy=policy, replicas=2, hardware__memory_utilization=0.235,
                                workload={"num_requests": 400, "classes": classes})
    pd.testing.assert_frame_equal(stepped.requests, jumped.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.steps, jumped.steps, check_exact=True)
    assert jumped.events < stepped.events
