"""The power model (sim/pricing/power.py): what a step draws, and a power cap as a speed limit."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.plan import StepShape
from sim.errors import ScenarioError
from sim.pricing.costs import Pricer
from sim.pricing.power import IDLE, TDP, power_figures, power_row, step_draws
from sim.pricing.roofline import RooflineCost, floor_parts
from sim.scenario.load import scenario_from_dict
from sim.scenario.specs import get_gpu, get_model

GPU = get_gpu("H100-SXM")
PREFILL = StepShape(num_tokens=4096, num_seqs=2, prefill_tokens=4096, prefill_attn=2048.0 * 2048 * 2,
                    decode_seqs=0, decode_context=0, num_sampled=2)
DECODE = StepShape(num_tokens=8, num_seqs=8, prefill_tokens=0, prefill_attn=0, decode_seqs=8,
                   decode_context=8 * 1000, num_sampled=8)


def cost(cap=None, gpu=GPU):
    return RooflineCost(get_model("llama-3-8b"), gpu, power_cap_w=cap)


def priced(c, shape: StepShape) -> float:
    return float(Pricer(c).price(shape.vectors())[0][0])


def watts(c, shape: StepShape, seconds: float) -> float:
    row = power_row(c.gpu, c.power_cap_w, c.pp)
    return float(step_draws(c.params[None, :], row[None, :], np.zeros(1, dtype=np.int64), shape.vectors(),
                            np.array([seconds]))[0])


def test_memory_bound_decode_draws_less_than_compute_bound_prefill():
    c = cost()
    decode, prefill = watts(c, DECODE, priced(c, DECODE)), watts(c, PREFILL, priced(c, PREFILL))
    idle, _, _, tdp = power_figures(GPU)
    assert idle < decode < 0.6 * tdp  # well below TDP, as measured decode is
    assert prefill > 0.8 * tdp and prefill <= tdp  # near the power limit, never above
    assert decode < prefill


def test_an_empty_step_draws_idle_and_a_longer_step_of_the_same_work_draws_less():
    c = cost()
    idle = power_figures(GPU)[0]
    empty = StepShape(num_tokens=0, num_seqs=0, prefill_tokens=0, prefill_attn=0, decode_seqs=0,
                      decode_context=0, num_sampled=0)
    assert watts(c, empty, 0.01) == idle
    t = priced(c, DECODE)
    assert watts(c, DECODE, 2 * t) < watts(c, DECODE, t)


def test_a_cap_slows_compute_bound_steps_but_not_memory_bound_ones_below_it():
    free, capped = cost(), cost(cap=400)
    assert priced(capped, PREFILL) > 1.1 * priced(free, PREFILL)
    assert watts(free, DECODE, priced(free, DECODE)) < 400
    assert priced(capped, DECODE) == priced(free, DECODE)


def test_a_capped_step_draws_its_cap_and_never_beats_the_floor():
    capped = cost(cap=350)
    t = priced(capped, PREFILL)
    assert watts(capped, PREFILL, t) == pytest.approx(350, rel=1e-9)
    nbytes, flops = floor_parts(capped.params, PREFILL.vectors()[0])
    assert t >= max(nbytes, flops) and t >= priced(cost(), PREFILL)


def test_a_cap_at_tdp_changes_nothing_and_a_lower_cap_is_slower():
    times = [priced(cost(cap), PREFILL) for cap in (None, 700, 500, 300)]
    assert times[0] == times[1] < times[2] < times[3]


def test_every_catalog_gpu_has_a_power_model_between_idle_and_tdp():
    from sim.scenario.specs.gpus import GPU_CATALOG

    for name, g in GPU_CATALOG.items():
        row = power_row(g)
        assert 0 < row[IDLE] < row[TDP] == g.power_w, name


def scenario(hardware: dict):
    return scenario_from_dict({"model": "llama-3-8b", "hardware": hardware}, "s.yaml")


@pytest.mark.parametrize("cap, words", [(800, "above H100-SXM's TDP of 700 W"), (50, "below H100-SXM's idle draw")])
def test_a_cap_outside_idle_to_tdp_is_refused_naming_the_file_and_field(cap, words):
    with pytest.raises(ScenarioError) as e:
        scenario({"gpu": "H100-SXM", "power_cap_w": cap})
    text = str(e.value)
    assert "s.yaml" in text and "power_cap_w" in text and words in text, text


def test_a_cap_on_a_gpu_without_tdp_is_refused():
    gpu = {"name": "mine", "memory_gib": 80, "hbm_tb_s": 3, "peaks": {"bf16": 900}, "link": "pcie5"}
    with pytest.raises(ScenarioError) as e:
        scenario({"gpu": gpu, "price_per_gpu_hour": 1.0, "power_cap_w": 300})
    assert "power_cap_w" in str(e.value) and "no power_w" in str(e.value)


def test_a_defined_gpu_with_its_own_tdp_takes_the_rule_unless_it_gives_figures():
    s = scenario({"gpu": {"base": "H100-SXM", "power_w": 500}})
    idle, _, _, tdp = power_figures(s.gpu_spec)
    assert tdp == 500 and idle == pytest.approx(0.115 * 500)
    s = scenario({"gpu": {"base": "H100-SXM", "power_w": 500, "idle_w": 60}})
    assert power_figures(s.gpu_spec)[0] == 60
