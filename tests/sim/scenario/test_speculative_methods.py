"""Speculative decoding as deployed (issue 27): who drafts (a draft model, the model's own MTP
layer, an EAGLE head, n-gram lookup), priced with the drafter's own cost; a mean acceptance
length in place of a rate."""

from __future__ import annotations

import pytest

from sim.core.plan import StepShape
from sim.errors import ScenarioError
from sim.pricing import roofline_for
from sim.scenario.load import load_scenario
from sim.scenario.schema import rate_for_mean_length

BASE = ["model=deepseek-v3", "hardware.gpu=H200", "hardware.tp=8", "workload.num_requests=5"]


def _load(spec: str | None, base=BASE):
    return load_scenario(None, base + ([f"scheduler.speculative={spec}"] if spec else []))


def _draft_seconds(s, k: int) -> float:
    shape = StepShape(64 * (1 + k), 64, 0, 0, 64, 64 * 2000, 64, 64 * k)
    return roofline_for(s).op_times(shape).get("draft", 0.0)


@pytest.mark.parametrize("mean,k", [(1.0, 3), (1.8, 1), (2.5, 3), (4.2, 5)])
def test_a_mean_acceptance_length_is_the_rate_with_that_mean(mean, k):
    a = rate_for_mean_length(mean, k)
    assert sum(a**i for i in range(k + 1)) == pytest.approx(mean, abs=1e-9)
    s = _load(f"{{method: ngram, num_tokens: {k}, mean_acceptance_length: {mean}}}")
    assert s.scheduler.speculative.acceptance_rate == a


def test_each_method_pays_for_its_drafter():
    mtp = _draft_seconds(_load("{method: mtp, num_tokens: 2}"), 2)
    eagle = _draft_seconds(_load("{method: eagle, num_tokens: 2}"), 2)
    ngram = _draft_seconds(_load("{method: ngram, num_tokens: 2}"), 2)
    target = roofline_for(_load(None)).step_time(StepShape(64, 64, 0, 0, 64, 64 * 2000, 64))
    assert ngram == 0.0  # prompt lookup runs on the CPU
    assert 0 < eagle < mtp < target  # one dense layer < one MLA + MoE layer < all 61 layers


def test_mtp_and_eagle_heads_take_memory_from_the_kv_cache():
    base, mtp = _load(None).memory, _load("{method: mtp, num_tokens: 1}").memory
    head = _load("{method: mtp, num_tokens: 1}").model_spec
    extra = (mtp.weight_bytes - base.weight_bytes) * 8
    assert 0.9 * head.mtp_params < extra < 1.1 * head.mtp_params  # about one more layer, in fp8
    assert mtp.num_blocks < base.num_blocks


@pytest.mark.parametrize("spec,fragment", [
    ("{method: mtp}", "mtp needs a model with next-n prediction layers"),
    ("{method: draft}", "give it for method draft"),
    ("{method: eagle, draft_model: tiny-llama}", "give it for method draft"),
    ("{method: ngram, acceptance_rate: 0.5, mean_acceptance_length: 2}", "not both"),
    ("{method: ngram, num_tokens: 2, mean_acceptance_length: 3.5}", "below num_tokens + 1"),
    ("{method: medusa}", "method"),
])
def test_speculation_a_model_cannot_run_is_refused_by_name(spec, fragment):
    with pytest.raises(ScenarioError) as e:
        _load(spec, ["model=llama-3-8b"])
    assert "speculative" in str(e.value) and fragment in str(e.value)
