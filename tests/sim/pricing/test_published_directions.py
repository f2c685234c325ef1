"""The roofline model reproduces the direction of published results."""

from __future__ import annotations

from sim.loops.run import simulate
from tests.sim.helpers import scenario

LONG_PROMPTS = {
    "workload__num_requests": 800,
    "workload__prompt_len": {"dist": "lognormal", "mean": 2000, "sigma": 0.5, "max": 6000},
    "workload__output_len": {"dist": "lognormal", "mean": 250, "sigma": 0.5, "max": 1000},
}


def test_chunked_prefill_lowers_p99_tpot_sarathi_serve():
    load = {"workload__arrival": {"process": "poisson", "rate": 8}, **LONG_PROMPTS}
    plain = simulate(scenario(scheduler__policy="continuous", **load)).summary
    chunked = simulate(scenario(scheduler__policy="chunked-prefill", scheduler__chunk_size=512,
                                **load)).summary
    assert chunked["tpot_p99"] < 0.75 * plain["tpot_p99"]


def test_disaggregation_raises_goodput_per_gpu_under_tight_slos_distserve():
    load = {"workload__arrival": {"process": "poisson", "rate": 10}, **LONG_PROMPTS,
            "slo": {"ttft_s": 0.4, "tpot_s": 0.015}}  # just above a decode-only step (~14 ms)
    colocated = simulate(scenario(replicas=2, **load)).summary
    disaggregated = simulate(scenario(
        disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}, "link": {"type": "nvlink"}},
        **load)).summary
    assert colocated["goodput_per_gpu"] > 0
    assert disaggregated["goodput_per_gpu"] > 2 * colocated["goodput_per_gpu"]
