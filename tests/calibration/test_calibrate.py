"""``servesim calibrate``: what a profile records (a quick one of the CPU engine), and what it
finds (one of a stand-in engine whose times are given: ``fake_engine``).

How close a profile of the real engine comes to it is measured by ``benchmarks/quick_checks.py``
(and ``benchmarks/validation_bench.py``), not here: timings depend on the machine's load."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from sim.pricing.profile import STEP_FEATURES, load_profile
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


def test_profile_has_per_op_tables_fits_and_a_step_fit(given_profile):
    """Calibration of an engine whose step and op times are given recovers them exactly: the
    per-op tables, the attention fits, the whole-step fit and the serving loop's cost."""
    from calibration.ops import HEAD, LINEAR
    from tests.calibration.fake_engine import DECODE_CONTEXT_S, LOOP, OPS, PREFILL_ATTN_S, ROW_S, step_coefficients

    p = load_profile(given_profile)
    ops = p.ops
    for t in (ops.linear, ops.other, ops.lm_head):
        assert len(t.x) >= 2 and np.all(np.diff(t.seconds) >= 0) and t.seconds[0] > 0
    want = [sum(OPS[k][0] + OPS[k][1] * x for k in LINEAR) for x in ops.linear.x]
    np.testing.assert_allclose(ops.linear.seconds, want, rtol=1e-9)
    head = [sum(OPS[k][0] + OPS[k][1] * x for k in HEAD) for x in ops.lm_head.x]
    np.testing.assert_allclose(ops.lm_head.seconds, head, rtol=1e-9)
    assert ops.attn_prefill.features == ["prefill_rows", "prefill_attn"]
    assert ops.attn_decode.features == ["decode_rows", "decode_context"]
    assert all(c >= 0 for c in ops.attn_prefill.coef + ops.attn_decode.coef)
    assert ops.attn_prefill.coef[1] == pytest.approx(PREFILL_ATTN_S, rel=1e-9)
    assert ops.attn_decode.coef[1] == pytest.approx(DECODE_CONTEXT_S, rel=1e-9)
    assert ops.attn_decode.coef[0] > ROW_S  # a row's attention plus its host work
    assert p.step is not None and p.step.features == list(STEP_FEATURES) and p.step.r2 == pytest.approx(1.0)
    coef = step_coefficients()
    coef["num_seqs"] += LOOP[1]  # the serving loop's per-row cost is folded into the row term
    np.testing.assert_allclose(p.step.coef, [coef[f] for f in STEP_FEATURES], rtol=1e-9)
    assert p.overhead_s == pytest.approx(LOOP[0], rel=1e-9)  # the serving loop's own cost per step
    fit = p.grid["fit"]
    assert fit["step"]["median_abs_rel_error"] < 1e-9 and fit["ops_on_steps"]["median_abs_rel_error"] < 1e-9
    assert fit["noise_factor"] == pytest.approx(1.0) and p.grid["probe_drift"] == pytest.approx(0.0, abs=1e-9)
    assert p.grid["wake_penalty"] == pytest.approx(0.0, abs=1e-9)
    assert p.prefer in ("ops", "step")


def test_profiled_cost_prices_steps_in_both_modes(given_profile):
    from engine.plan_timer import Row, decode_rows, shape_of
    from sim.pricing.profiled import ProfiledCost
    from sim.pricing.roofline import RooflineCost
    from sim.scenario.specs import get_gpu
    from tests.calibration.fake_engine import LOOP, step_seconds

    p = load_profile(given_profile)
    roof = RooflineCost(get_model(p.model), get_gpu("H100-SXM"))
    small, big = shape_of(decode_rows(1, 64)), shape_of([Row(0, 128)])
    for mode in ("step", "ops"):
        cost = ProfiledCost(p, roof, mode=mode)
        for shape in (small, big):  # the engine's time and the serving loop's around it
            want = step_seconds(shape) + LOOP[0] + LOOP[1] * shape.num_seqs
            assert cost.step_time(shape) == pytest.approx(want, rel=1e-6), mode
        _, flags = cost.price(np.concatenate([small.vectors(), big.vectors()]))
        assert not flags.any()  # inside the measured range
        _, flags = cost.price(shape_of([Row(0, 4 * p.grid["max_tokens"])]).vectors())  # beyond the grid
        assert flags.any()


def test_measurements_are_medians_of_interleaved_runs():
    from calibration.calibrate import Options, load_engine
    from calibration.measure import make_timer, measure
    from calibration.progress import Ticker
    from engine.plan_timer import PlanTimer, Row, decode_rows

    executor = load_engine(Options(model="tiny-llama", progress=False)).executor
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
