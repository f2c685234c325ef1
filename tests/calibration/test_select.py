"""Reconciling the per-op model with whole steps; the spinning real-time environment (on a
clock of its own)."""

from __future__ import annotations

import pytest

from calibration import select
from calibration.measure import Sample
from engine.plan_timer import Row, decode_rows, shape_of
from sim.pricing.profile import LinearFit, Ops, Table
from sim.scenario.specs import get_model

SPEC = get_model("tiny-llama-12m")
OPS = Ops(linear=Table(x=[1, 8, 64], seconds=[1e-3, 2e-3, 8e-3]),
          other=Table(x=[1, 64], seconds=[5e-4, 1e-3]),
          lm_head=Table(x=[1, 8], seconds=[4e-4, 1e-3]),
          attn_prefill=LinearFit(features=["prefill_rows", "prefill_attn"], coef=[2e-4, 1e-7], r2=1),
          attn_decode=LinearFit(features=["decode_rows", "decode_context"], coef=[2e-4, 1e-6], r2=1))
PLANS = [decode_rows(b, c) for b in (1, 2, 4, 8) for c in (16, 200)] + [[Row(0, q)] for q in (8, 32, 64)]


def _samples(alpha: float, beta: float) -> list[Sample]:
    cost = select.ops_cost(OPS, SPEC)
    return [Sample(rows, shape_of(rows), alpha * float(cost.step_time(shape_of(rows))) + beta)
            for rows in PLANS]


def test_scale_and_offset_are_recovered_and_applied():
    samples = _samples(1.2, 3e-4)
    alpha, beta = select.fit_scale(OPS, samples, SPEC)
    assert alpha == pytest.approx(1.2, rel=1e-3) and beta == pytest.approx(3e-4, rel=1e-2)
    fixed = select.rescale(OPS, alpha, beta)
    assert select.errors(fixed, samples, SPEC)["median_abs_rel_error"] < 1e-3
    assert select.errors(OPS, samples, SPEC)["bias"] < -0.1
    assert fixed.other.seconds[0] == pytest.approx(1.2 * 5e-4 + 3e-4, rel=1e-3)


def test_choose_the_model_that_errs_less():
    assert select.choose({"step": {"cv_median_abs_rel_error": 0.05},
                          "ops_on_steps": {"median_abs_rel_error": 0.03}}) == "ops"
    assert select.choose({"step": {"cv_median_abs_rel_error": 0.02},
                          "ops_on_steps": {"median_abs_rel_error": 0.03}}) == "step"


class BusyClock:
    """A monotonic clock that moves ``tick`` seconds each time it is read (a core that spins)."""

    def __init__(self, tick: float = 1e-4):
        self.t = 100.0
        self.tick = tick
        self.reads = 0

    def __call__(self) -> float:
        self.t += self.tick
        self.reads += 1
        return self.t


def test_spinning_environment_keeps_real_time(monkeypatch):
    simpy = pytest.importorskip("simpy")
    from types import SimpleNamespace

    from calibration import realtime

    clock = BusyClock()
    monkeypatch.setattr("simpy.rt.monotonic", clock)
    monkeypatch.setattr(realtime, "time", SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("simpy.rt.sleep", lambda s: pytest.fail("the spinning environment slept"))
    env = realtime.SpinningRealtimeEnvironment(factor=1.0, strict=False)
    start = env.real_start
    seen = []

    def proc():
        for _ in range(3):
            yield env.timeout(0.02)
            seen.append(clock())

    env.process(proc())
    env.run()
    assert isinstance(env, simpy.Environment)
    for t, want in zip(seen, (0.02, 0.04, 0.06), strict=True):
        assert want <= t - start < want + 3 * clock.tick  # never early; late by a read or two
    assert clock.reads > 3 * 0.02 / clock.tick  # it waited by reading the clock, not by sleeping
