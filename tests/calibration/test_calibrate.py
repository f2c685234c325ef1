"""``servesim calibrate``: a quick profile of the CPU engine, and what it records."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from sim.pricing.profile import load_profile
from sim.scenario.specs import get_model

pytest.importorskip("torch")


def test_profile_records_where_and_what_it_measured(quick_profile):
    import torch

    p = load_profile(quick_profile)
    spec = get_model("tiny-llama-12m")
    assert p.source.startswith("servesim calibrate")
    assert p.model == spec.name and p.device.type == "cpu" and p.device.name
    assert p.dtype == "fp32" and p.tp == 1
    assert p.model_shape["hidden_size"] == spec.hidden_size
    assert p.versions["torch"] == torch.__version__ and "triton" in p.versions
    assert dt.datetime.fromisoformat(p.created).year >= 2024
    g = p.grid
    assert g["threads"] == 1 and g["tokens"] and g["decode_batches"] and g["repeats"] >= 1
    assert g["probe_s"] > 0 and "loop" in g["fit"] and "step" in g["fit"]


def test_profile_has_per_op_tables_fits_and_a_step_fit(quick_profile):
    p = load_profile(quick_profile)
    ops = p.ops
    for t in (ops.linear, ops.other, ops.lm_head):
        assert len(t.x) >= 2 and np.all(np.diff(t.seconds) >= 0) and t.seconds[0] > 0
    assert ops.attn_prefill.features == ["prefill_rows", "prefill_attn"]
    assert ops.attn_decode.features == ["decode_rows", "decode_context"]
    assert all(c >= 0 for c in ops.attn_prefill.coef + ops.attn_decode.coef)
    assert p.step is not None and len(p.step.coef) == 6 and p.step.r2 > 0.5
    assert 0 < p.overhead_s < 0.01  # the serving loop's own cost per step
    assert p.prefer in ("ops", "step")
    # A 1-token decode on a tiny model costs milliseconds, not microseconds or seconds.
    assert 1e-4 < ops.linear.seconds[0] + ops.lm_head.seconds[0] < 0.05


def test_profiled_cost_prices_steps_in_both_modes(quick_profile):
    from engine.plan_timer import Row, decode_rows, shape_of
    from sim.pricing.profiled import ProfiledCost
    from sim.pricing.roofline import RooflineCost
    from sim.scenario.specs import get_gpu

    p = load_profile(quick_profile)
    roof = RooflineCost(get_model(p.model), get_gpu("H100-SXM"))
    small, big = shape_of(decode_rows(1, 64)), shape_of([Row(0, 128)])
    for mode in ("step", "ops"):
        cost = ProfiledCost(p, roof, mode=mode)
        assert 0 < cost.step_time(small) < cost.step_time(big) < 1.0
        _, flags = cost.price(np.concatenate([small.vectors(), big.vectors()]))
        assert not flags.any()  # inside the measured range
        _, flags = cost.price(shape_of([Row(0, 4 * p.grid["max_tokens"])]).vectors())  # beyond the grid
        assert flags.any()


def test_measurements_are_medians_of_interleaved_runs():
    from calibration.calibrate import Options, load_engine
    from calibration.measure import make_timer, measure
    from calibration.progress import Ticker
    from engine.plan_timer import PlanTimer, Row, decode_rows

    executor, _, _ = load_engine(Options(model="tiny-llama", progress=False))
    h = PlanTimer(executor)
    plans = [decode_rows(2, 40), [Row(0, 32)], [Row(16, 8, sample=False)]]
    samples = measure(h, plans, repeats=3, warmup=1, ticker=Ticker(None), timer=make_timer("cpu"))
    assert [s.shape.num_seqs for s in samples] == [2, 1, 1]
    for s in samples:
        assert s.wall > 0 and s.timed_wall > 0
        assert {"qkv_proj", "attention", "lm_head", "sample", "prepare_inputs"} <= set(s.ops)
    assert samples[2].shape.num_sampled == 0  # a chunk that does not finish its prompt
    assert executor.blocks.num_free == executor.num_blocks and not executor.requests


def test_random_plans_stay_in_the_grid():
    from calibration.grid import grid_for, random_plans

    g = grid_for("cpu", quick=True)
    plans = random_plans(g, 60)
    assert len(plans) == 60
    for rows in plans:
        assert 1 <= len(rows) <= g.max_seqs
        assert sum(r.new for r in rows) <= g.max_tokens + g.max_seqs
        assert all(r.computed <= g.max_context and r.new >= 1 for r in rows)
    kinds = {("decode" if all(r.new == 1 for r in rows) else "other") for rows in plans}
    assert kinds == {"decode", "other"}
    assert grid_for("cuda").max_tokens > g.max_tokens
    assert grid_for("cpu").clipped(256).max_tokens <= 128
    big = grid_for("cpu", max_tokens=2048, max_seqs=6, max_context=300)
    assert big.tokens[-2:] == (1024, 2048) and big.prefill_chunks[-1] == 2048
    assert big.decode_batches == (1, 2, 4, 6) and big.sampled[-1] == 6
    assert big.decode_contexts[-1] == 300 and max(big.prefill_contexts) == 300
