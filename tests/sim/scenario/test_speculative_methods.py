"""Speculative decoding as deployed (issue 27): who drafts (a draft model, the model's own MTP
layer, an EAGLE head, n-gram lookup), priced with the drafter's own cost; acceptance per draft
position (conditional, or as vLLM reports it), one rate, or a mean acceptance length."""

from __future__ import annotations

import pytest

from sim.core.plan import StepShape
from sim.errors import ScenarioError
from sim.pricing import roofline_for
from sim.scenario.load import load_scenario, scenario_from_dict
from sim.scenario.schema import expected_tokens, rate_for_mean_length, survival

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
    ("{method: ngram, acceptance_rate: 0.5, mean_acceptance_length: 2}", "mean_acceptance_length: 2 disagrees"),
    ("{method: ngram, num_tokens: 2, acceptance_rates: [0.9]}", "acceptance_rates: expected 2 values"),
    ("{method: ngram, num_tokens: 3, accepted_per_position: [0.9, 0.5]}", "accepted_per_position: expected 3"),
    ("{method: ngram, accepted_per_position: [0.5, 0.5]}", "position 2 equals position 1"),
    ("{method: ngram, accepted_per_position: [0.5, 0.6]}", "position 2 (0.6) above position 1"),
    ("{method: ngram, acceptance_rates: [0.8, 0.5], accepted_per_position: [0.8, 0.5]}",
     "accepted_per_position: disagrees with acceptance_rates"),
    ("{method: ngram, acceptance_rates: [0.8, 0.5], acceptance_rate: 0.8}", "acceptance_rate: 0.8 disagrees"),
    ("{method: ngram, acceptance_rates: [0.8, 0.5], mean_acceptance_length: 2.5}",
     "mean_acceptance_length: 2.5 disagrees with the rates, whose mean length is 2.2"),
    ("{method: ngram, acceptance_rates: [0.8, 0.5], mean_acceptance_length: 3.5}", "below num_tokens + 1"),
    ("{method: ngram, acceptance_rates: [0.8, -0.1]}", "acceptance_rates[1]: Input should be greater than or equal"),
    ("{method: ngram, num_tokens: 2, mean_acceptance_length: 3.5}", "below num_tokens + 1"),
    ("{method: medusa}", "method"),
])
def test_speculation_a_model_cannot_run_is_refused_by_name(spec, fragment):
    with pytest.raises(ScenarioError) as e:
        _load(spec, ["model=llama-3-8b"])
    assert "speculative" in str(e.value) and fragment in str(e.value)


# -- acceptance per position -----------------------------------------------------------------
def _spec(text: str):
    return _load(text, ["model=llama-3-8b"]).scheduler.speculative


def test_a_verify_step_yields_one_plus_the_chance_of_reaching_each_position():
    sp = _spec("{method: ngram, acceptance_rates: [0.8, 0.5, 0.25]}")
    assert sp.num_tokens == 3  # the vector's length sets it
    assert sp.rates == (0.8, 0.5, 0.25) and sp.acceptance_rate is None
    assert sp.survival == pytest.approx((0.8, 0.4, 0.1))
    assert sp.mean_length == pytest.approx(1 + 0.8 + 0.4 + 0.1)  # 2.3
    assert expected_tokens([0.5]) == 1.5 and expected_tokens([0.0, 0.9]) == 1.0


def test_vllm_per_position_rates_are_unconditional():
    """vLLM's per-position rate is accepted_per_pos[i] / num_drafts = p1·…·p_i."""
    sp = _spec("{method: ngram, accepted_per_position: [0.8, 0.4, 0.1]}")
    assert sp.rates == pytest.approx((0.8, 0.5, 0.25))
    assert sp.mean_length == pytest.approx(2.3)
    assert _spec("{method: ngram, accepted_per_position: [0.6, 0.0, 0.0]}").rates == (0.6, 0.0, 0.0)


@pytest.mark.parametrize("form", ["acceptance_rate: 0.6", "mean_acceptance_length: 2.176",
                                  "acceptance_rates: [0.6, 0.6, 0.6]", "accepted_per_position: [0.6, 0.36, 0.216]"])
def test_one_rate_and_a_mean_length_are_equal_rates_per_position(form):
    sp = _spec(f"{{method: ngram, num_tokens: 3, {form}}}")
    assert sp.rates == pytest.approx((0.6,) * 3, abs=1e-4) and len(set(sp.rates)) == 1
    assert sp.acceptance_rate == sp.rates[0]
    assert sp.mean_length == pytest.approx(1 + 0.6 + 0.36 + 0.216, abs=1e-4)


def test_the_default_is_one_rate_of_0_7():
    sp = _spec("{method: ngram}")
    assert sp.rates == (0.7,) * 4 and sp.acceptance_rate == 0.7
    assert sp.survival == (0.7, 0.7 * 0.7, 0.7 * 0.7 * 0.7, 0.7 * 0.7 * 0.7 * 0.7)  # multiplied in that order


@pytest.mark.parametrize("form", ["acceptance_rates: [0.8, 0.5], acceptance_rate: null",
                                  "acceptance_rates: [0.8, 0.5], mean_acceptance_length: 2.2",
                                  "acceptance_rates: [0.8, 0.5], mean_acceptance_length: 2.204",  # a report's rounding
                                  "acceptance_rates: [0.8, 0.5], accepted_per_position: [0.8, 0.4]",
                                  "acceptance_rates: [0.5, 0.5], acceptance_rate: 0.5"])
def test_forms_given_together_that_agree_are_taken(form):
    sp = _spec(f"{{method: ngram, {form}}}")
    assert sp.num_tokens == 2 and sp.rates[0] in (0.8, 0.5)


@pytest.mark.parametrize("spec", ["{method: ngram, num_tokens: 3, mean_acceptance_length: 2.5}",
                                  "{method: ngram, acceptance_rates: [0.9, 0.6, 0.3]}",
                                  "{method: ngram, accepted_per_position: [0.9, 0.54, 0.162]}",
                                  "{method: eagle, acceptance_rates: [0.5, 0.5]}"])
def test_a_scenario_as_written_out_reads_back_the_same(spec):
    """What a run writes (its applied config) and a driven run's warm-up re-read: a mean length
    used to come back with the rate it set, and be refused as both given."""
    s = _load(spec, ["model=llama-3-8b"])
    again = scenario_from_dict(s.model_dump(mode="json", exclude={"base_dir"}), "<again>", s.base_dir)
    assert again.scheduler.speculative.rates == s.scheduler.speculative.rates
    assert again.scheduler.speculative.num_tokens == s.scheduler.speculative.num_tokens


def test_survival_multiplies_in_position_order():
    assert survival([0.9, 0.5, 0.2]) == [0.9, 0.9 * 0.5, 0.9 * 0.5 * 0.2]


def test_the_setup_row_shows_the_acceptance_and_the_tokens_per_verify_step():
    from sim.results.describe import scheduler_text

    per_position = _load("{method: eagle, acceptance_rates: [0.8, 0.5, 0.25]}", ["model=llama-3-8b"])
    assert ("speculative decoding (eagle drafts 3, acceptance by position 0.8/0.5/0.25, "
            "2.30 tokens per verify step)") in scheduler_text(per_position.scheduler)
    one = _load("{draft_model: tiny-llama-12m, num_tokens: 4, acceptance_rate: 0.7}", ["model=llama-3-8b"])
    assert "(tiny-llama-12m drafts 4, acceptance 0.7, 2.77 tokens per verify step)" in scheduler_text(one.scheduler)


def _replica_rate(spec: str | None, *sets: str) -> float:
    from sim.pricing import make_cost_model
    from sim.pricing.capacity import replica_rate

    s = _load(spec, ["model=llama-3-8b", *sets])
    return replica_rate(s, make_cost_model(s), 600, 200)


def test_the_capacity_model_counts_the_tokens_a_verify_step_yields():
    """The SLA planner's replica rate: k + 1 tokens verified per decode row, L kept on average."""
    tight = "slo.tpot_s=0.012"
    plain = _replica_rate(None, tight)
    kept = _replica_rate("{method: ngram, acceptance_rates: [0.9, 0.8, 0.7]}", tight)
    wasted = _replica_rate("{method: ngram, acceptance_rates: [0.0, 0.0, 0.0]}", tight)
    assert wasted < plain < kept  # verifying costs; only accepted drafts pay it back
    # only the expected tokens per verify step count: a vector and the one rate of its mean agree
    mean = expected_tokens([0.9, 0.8, 0.7])
    same = _replica_rate(f"{{method: ngram, num_tokens: 3, mean_acceptance_length: {mean!r}}}", tight)
    assert same == pytest.approx(kept, rel=1e-9)


def test_verification_prices_k_plus_one_tokens_per_decode_row():
    """As the engines batch it: each decode row runs its token and its k drafts through the
    target, which samples (LM head) at all k + 1 positions."""
    import numpy as np

    from sim.core.plan import SHAPE_FIELDS, SHAPE_SIZE, _shape_of

    rows, k = 8, 4
    out = np.zeros(SHAPE_SIZE)
    _shape_of(out, np.ones(rows, np.int64), np.full(rows, 1000, np.int64), np.ones(rows, np.bool_), rows, k, 0, 16)
    shape = dict(zip(SHAPE_FIELDS, out, strict=True))
    assert shape["num_tokens"] == rows * (k + 1) and shape["verify_tokens"] == rows * k
    assert shape["decode_seqs"] == rows and shape["num_sampled"] == rows
    cost = roofline_for(_load("{method: ngram, num_tokens: 4}", ["model=llama-3-8b"]))
    spec = cost.op_times(StepShape(**shape))
    wide = cost.op_times(StepShape(rows * (k + 1), rows * (k + 1), 0, 0, rows * (k + 1), 0, rows * (k + 1)))
    for op in ("qkv_proj", "mlp", "lm_head"):
        assert spec[op] == pytest.approx(wide[op])  # the GEMMs and the LM head see (k + 1) tokens a row


@pytest.mark.parametrize("spec", ["{method: eagle, num_tokens: 2}", "{draft_model: tiny-llama-12m, num_tokens: 2}"])
def test_the_drafter_prefills_the_prompts_too(spec):
    """A step of prompts only still runs the drafter over them (its own KV cache); n-gram lookup
    has none."""
    prompt = StepShape(2000, 1, 2000, 2000 * 2001 / 2, 0, 0, 1)
    assert roofline_for(_load(spec, ["model=llama-3-8b"])).op_times(prompt).get("draft", 0.0) > 0
    assert roofline_for(_load("{method: ngram}", ["model=llama-3-8b"])).op_times(prompt).get("draft", 0.0) == 0
