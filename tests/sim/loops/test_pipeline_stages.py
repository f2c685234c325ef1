"""A pipeline stage's fixed time per micro-batch (``engines.<e>.stage_latency_s``): every stage
of a pp-way replica holds each micro-batch that much longer than its share of the compute."""

from __future__ import annotations

import pytest

from sim.loops.run import simulate
from tests.sim.helpers import scenario


def lone(stage_s: float, pp: int = 2):
    # one request at a time, so no micro-batch waits for another: each step crosses pp stages
    return scenario(model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 2, "pp": pp},
                    engine={"name": "vllm-v0", "request_overhead_s": 0.0, "stage_latency_s": stage_s},
                    workload={"num_requests": 3, "arrival": {"process": "closed", "concurrency": 1},
                              "prompt_len": {"dist": "fixed", "value": 100},
                              "output_len": {"dist": "fixed", "value": 40}})


@pytest.mark.parametrize("pp", [2, 4])
def test_each_stage_adds_its_latency_to_every_step(pp):
    base, slow = simulate(lone(0.0, pp)), simulate(lone(0.01, pp))
    steps = len(base.steps)
    assert len(slow.steps) == steps  # the same steps, each longer
    assert slow.steps["duration"].sum() - base.steps["duration"].sum() == pytest.approx(steps * pp * 0.01, rel=1e-9)


def test_tensorrt_llm_1x_has_a_fitted_stage_latency_and_a_single_stage_pays_none():
    from sim.scenario.engines import engine_cost

    assert engine_cost("tensorrt-llm").stage_latency_s > 0
    one = scenario(engine={"name": "tensorrt-llm", "request_overhead_s": 0.0},
                   workload={"num_requests": 5, "arrival": {"process": "closed", "concurrency": 1},
                             "prompt_len": {"dist": "fixed", "value": 100},
                             "output_len": {"dist": "fixed", "value": 10}})
    zero = scenario(engine={"name": "tensorrt-llm", "request_overhead_s": 0.0, "stage_latency_s": 0.0},
                    workload=one.workload.model_dump())
    assert simulate(one).requests["e2e"].tolist() == simulate(zero).requests["e2e"].tolist()
