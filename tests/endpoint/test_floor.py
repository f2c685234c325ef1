"""The step fit's floor: a step's compute costs at least the floor (a CPU streams the weights
once per step however few rows it runs); priced alike by ``profile_time`` (both loops), by
``calibration.fitting.predict`` and by the endpoint fit, which recovers it from probes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.fitting import predict
from endpoint.fit import fit, gap_step, prefill_steps
from endpoint.probes import GapPoint, TtftPoint
from sim.core.plan import DECODE_CONTEXT, DECODE_SEQS, NUM_SAMPLED, NUM_SEQS, NUM_TOKENS, SHAPE_SIZE
from sim.errors import ProfileError
from sim.pricing.profile import LinearFit, load_profile
from tests.sim.helpers import scenario
from tests.sim.loops.test_loops_agree import assert_identical, both_loops

TRUE = {"const": 0.004, "num_tokens": 1.2e-3, "prefill_attn": 5e-10, "decode_context": 3e-6, "num_seqs": 1e-3,
        "num_sampled": 0.0, "request": 0.006}
FLOOR = 0.030


def step_seconds(s: dict) -> float:
    compute = sum(TRUE[k] * s[k] for k in ("num_tokens", "prefill_attn", "num_seqs", "num_sampled"))
    return max(FLOOR, compute) + TRUE["const"] + TRUE["decode_context"] * s["decode_context"]


def floored_profile(path, floor: float = FLOOR) -> str:
    features = ["num_tokens", "prefill_attn", "num_seqs", "num_sampled", "floor", "const", "decode_context"]
    coef = [TRUE[f] if f != "floor" else floor for f in features]
    profile = {"schema_version": 1, "source": "test", "created": "2026-01-01",
               "device": {"name": "cpu", "type": "cpu"}, "model": "llama-3-8b", "model_shape": {"num_layers": 32},
               "dtype": "bf16", "ops": {"linear": {"x": [1.0, 512.0], "seconds": [0.004, 0.6]}},
               "step": {"features": features, "coef": coef, "r2": 0.99,
                        "ranges": {"num_tokens": [1, 100000], "num_seqs": [1, 1000], "num_sampled": [0, 1000],
                                   "decode_context": [0, 1e9], "prefill_attn": [0, 1e12]}},
               "prefer": "step"}
    path.write_text(json.dumps(profile))
    return str(path)


def test_profile_time_floors_the_compute_and_adds_the_rest(tmp_path):
    from sim.pricing import make_cost_model

    path = floored_profile(tmp_path / "p.json")
    cost = make_cost_model(scenario(cost={"model": "profile", "profile": path}))
    shapes, expected = [], []
    for b, ctx in ((1, 100), (4, 2000), (20, 300), (64, 9000)):
        s = np.zeros(SHAPE_SIZE)
        s[NUM_TOKENS] = s[NUM_SEQS] = s[DECODE_SEQS] = s[NUM_SAMPLED] = b
        s[DECODE_CONTEXT] = ctx
        shapes.append(s)
        expected.append(step_seconds({"num_tokens": b, "num_seqs": b, "num_sampled": b, "prefill_attn": 0,
                                      "decode_context": ctx}))
    got, flags = cost.price(np.array(shapes))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got[0] == pytest.approx(FLOOR + TRUE["const"] + 300e-6)  # one decode: on the floor
    assert got[3] > FLOOR + TRUE["const"] + TRUE["decode_context"] * 9000  # 64 decodes: above it
    assert not flags.any()
    fit_ = load_profile(path).step
    row = {"num_tokens": 1, "num_seqs": 1, "num_sampled": 1, "prefill_attn": 0, "decode_context": 100}
    assert predict(fit_, row) == pytest.approx(got[0])


def test_both_loops_price_a_floored_profile_alike(tmp_path):
    path = floored_profile(tmp_path / "p.json")
    fields = {"scheduler__policy": "chunked-prefill", "workload__arrival": {"process": "poisson", "rate": 3},
              "workload__num_requests": 80}
    reference, compiled = both_loops(cost={"model": "profile", "profile": path}, **fields)
    assert_identical(reference, compiled)
    _, plain = both_loops(cost={"model": "profile", "profile": floored_profile(tmp_path / "q.json", 0.0)}, **fields)
    assert compiled.steps["duration"].min() >= FLOOR + TRUE["const"]
    assert plain.steps["duration"].min() < FLOOR  # the floor is what made the small steps longer


@pytest.mark.parametrize("features, coef, why", [
    (["floor", "const"], [0.01, 0.001], "floor must follow"),
    (["const", "floor"], [0.001, -0.01], "floor must be ≥ 0"),
    (["const", "ceiling"], [0.001, 0.01], "unknown features"),
])
def test_a_bad_floor_is_a_clear_profile_error(tmp_path, features, coef, why):
    path = floored_profile(tmp_path / "p.json")
    data = json.loads(Path(path).read_text())
    data["step"] = LinearFit(features=features, coef=coef, r2=0.9).model_dump(mode="json")
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=why):
        load_profile(tmp_path / "bad.json")


def test_the_endpoint_fit_recovers_the_floor():
    ttft = [TtftPoint(p, sum(step_seconds(s) for s in prefill_steps(p, 256)) + TRUE["request"], None)
            for p in (8, 16, 32, 64, 128, 200, 256, 400, 700, 1000)]
    gaps = []
    for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
        for c in (32, 512):
            g = GapPoint("decode", b, b * c, 0, 0.0)
            g.seconds = step_seconds(gap_step(g))
            gaps.append(g)
    for b, p in ((2, 64), (4, 200), (12, 100)):
        g = GapPoint("mixed", b, b * 100, p, 0.0)
        g.seconds = step_seconds(gap_step(g))
        gaps.append(g)
    f = fit(ttft, gaps, 256)
    assert f.floor == pytest.approx(FLOOR, rel=0.02)
    assert f.stats["median_abs_rel_error"] < 1e-3
    for k in ("num_tokens", "num_seqs", "decode_context", "request"):
        assert f.coef[k] == pytest.approx(TRUE[k], rel=0.05, abs=2e-4), k
    assert f.features().index("floor") == 4  # after the compute terms, before what adds on top
    plain = fit(ttft, gaps, 256, floor=False)
    assert plain.floor == 0 and "floor" not in plain.features()
    assert plain.stats["loss"] > 10 * f.stats["loss"]
