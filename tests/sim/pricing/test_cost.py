"""The roofline cost model behaves like the hardware it describes."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.plan import StepShape
from sim.pricing import RooflineCost
from sim.scenario.engines import EngineCost
from sim.scenario.specs import get_gpu, get_model

M, G = get_model("llama-3-8b"), get_gpu("H100-SXM")


def decode(batch, ctx):
    return StepShape(batch, batch, 0, 0, batch, batch * ctx, batch)


def prefill(n):
    return StepShape(n, 1, n, n * n, 0, 0, 1)


def test_small_decode_is_bound_by_reading_the_weights():
    c = RooflineCost(M, G, memory_efficiency=1.0, engine=EngineCost())  # no engine overheads
    t = c.step_time(decode(1, 16))
    embedding_table = M.vocab_size * M.hidden_size * 2  # only one row of it is read
    assert t == pytest.approx((M.weight_bytes() - embedding_table) / G.hbm_bandwidth, rel=0.02)


def test_long_prefill_is_bound_by_compute():
    c = RooflineCost(M, G, compute_efficiency=1.0, step_overhead_s=0.0)
    n = 8192
    linear_flops = 2 * n * (M.num_params - M.vocab_size * M.hidden_size * 2)
    assert c.step_time(prefill(n)) > linear_flops / G.bf16_flops
    assert c.step_time(prefill(n)) < 2 * linear_flops / G.bf16_flops


def test_costs_grow_with_work_and_shrink_with_faster_gpus():
    c = RooflineCost(M, G)
    assert c.step_time(decode(64, 4000)) > c.step_time(decode(64, 1000))
    assert c.step_time(prefill(4000)) > c.step_time(prefill(1000))
    b200 = RooflineCost(M, get_gpu("B200"))
    assert b200.step_time(decode(64, 1000)) < c.step_time(decode(64, 1000))


def test_tensor_parallel_splits_work_and_adds_allreduce():
    one = RooflineCost(M, G, step_overhead_s=0)
    two = RooflineCost(M, G, tp=2, step_overhead_s=0)
    ops = two.op_times(decode(8, 1000))
    assert "allreduce" in ops and ops["allreduce"] > 0
    assert two.step_time(decode(8, 1000)) < one.step_time(decode(8, 1000))


def test_vectorised_pricing_equals_one_by_one():
    c = RooflineCost(M, G)
    ctx = np.arange(100, 110) * 16.0
    many = c.step_time(StepShape(16.0, 16.0, 0.0, 0.0, 16.0, ctx, 16.0))
    one = [c.step_time(decode(16, x / 16)) for x in ctx]
    np.testing.assert_allclose(many, one)


@pytest.mark.parametrize(("fit", "features", "field", "words"), [
    ("attn_decode", ["const", "num_tokens"], "ops", "attn_decode fit has unknown features ['num_tokens']"),
    ("attn_prefill", ["const", "const"], "ops.attn_prefill", "features repeat"),
])
def test_a_profile_fit_with_features_it_cannot_have_is_refused(tmp_path, fit, features, field, words):
    import json

    from sim.errors import ProfileError
    from sim.pricing.profile import load_profile
    from tests.sim.helpers import write_profile

    path = tmp_path / "p.json"
    write_profile(path)
    data = json.loads(path.read_text())
    data["ops"][fit].update(features=features, coef=[1e-3] * len(features))
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.field == field and words in str(err.value)
