"""Speculative decoding in the core. Acceptance per draft position (sim/core/rng.py:
accepted_drafts): one uniform draw per decode row, keyed by (seed, request, tokens generated),
compared with P(at least j drafts accepted) = p1·…·pj. Equal rates reproduce the former
geometric draw exactly; the simulated mean tokens per verify step is the vector's expectation.
Chunked prefill charges the drafts to the step's token budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.rng import SPECULATIVE, accepted_drafts, uniform
from sim.loops.run import simulate
from sim.scenario.schema import expected_tokens, survival
from tests.sim.helpers import scenario

# the draw's rule, as Python calls it (a compiled core function is callable from compiled code
# only; its random numbers, ``uniform``, are the compiled ones); the runs below use it compiled
draw = getattr(accepted_drafts, "py_func", accepted_drafts)

def _former_draw(seed: int, rid: int, generated: int, k: int, alpha: float) -> int:
    """The draw as it was, with one acceptance_rate: a geometric count capped at k."""
    if alpha <= 0.0 or k == 0:
        return 0
    u = uniform(seed, SPECULATIVE, rid, generated)
    n, p = 0, alpha
    while n < k and u < p:
        n += 1
        p *= alpha
    return n


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.9, 0.999999])
@pytest.mark.parametrize("k", [1, 4, 7])
def test_equal_rates_draw_exactly_as_one_rate_did(alpha, k):
    surv = np.array(survival([alpha] * k))
    for rid in range(40):
        for generated in range(0, 400, 7):
            assert draw(11, rid, generated, k, surv) == _former_draw(11, rid, generated, k, alpha)


def test_each_position_is_accepted_at_its_rate_given_the_ones_before():
    rates = [0.9, 0.7, 0.4, 0.2]
    surv = np.array(survival(rates))
    n = np.array([draw(3, rid, g, 4, surv) for rid in range(400) for g in range(500)])
    reached = len(n)
    for j, p in enumerate(rates, start=1):  # of the rows that accepted j - 1, the share that accepted j
        kept = int((n >= j).sum())
        assert kept / reached == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / reached))
        reached = kept
    mean = 1 + n.mean()
    var = sum((2 * j - 1) * s for j, s in enumerate(surv, start=1)) - (mean - 1) ** 2
    assert mean == pytest.approx(expected_tokens(rates), abs=4 * math.sqrt(var / len(n)))


def test_no_draft_is_accepted_after_a_position_that_never_is():
    surv = np.array(survival([0.8, 0.0, 0.9]))
    assert max(draw(0, rid, g, 3, surv) for rid in range(50) for g in range(50)) == 1
    assert draw(0, 1, 1, 3, np.array(survival([0.0, 0.9, 0.9]))) == 0


LONG = {"workload__num_requests": 60, "workload__output_len": {"dist": "fixed", "value": 2000},
        "workload__prompt_len": {"dist": "fixed", "value": 200}}


@pytest.mark.parametrize("rates", [[0.9, 0.75, 0.5, 0.3, 0.1], [0.6, 0.6, 0.6], [0.95, 0.2]])
def test_a_long_run_keeps_the_expected_tokens_per_verify_step(rates):
    """40,000 to 75,000 verify steps: the mean is within 1.5% (4 standard errors are under 1%; each
    request's last step, cut at its output length, costs under 0.2%)."""
    r = simulate(scenario(scheduler__speculative={"method": "ngram", "acceptance_rates": rates}, **LONG))
    decode_rows = r.steps["decode_seqs"].sum()
    tokens_from_decodes = r.requests["output_tokens"].sum() - len(r.requests)  # the first comes from prefill
    assert decode_rows > 35_000
    assert tokens_from_decodes / decode_rows == pytest.approx(expected_tokens(rates), rel=0.015)


def test_k_equal_rates_run_exactly_as_one_rate():
    one = simulate(scenario(scheduler__speculative={"draft_model": "tiny-llama-12m", "num_tokens": 3,
                                                    "acceptance_rate": 0.8}))
    each = simulate(scenario(scheduler__speculative={"draft_model": "tiny-llama-12m",
                                                     "acceptance_rates": [0.8, 0.8, 0.8]}))
    for a, b in ((one.requests, each.requests), (one.steps, each.steps)):
        assert a.equals(b)


def test_chunked_prefill_charges_each_decode_row_its_drafts():
    """As vLLM schedules it: a running request's token and its k drafts come out of the step's
    token budget, and prompt chunks get what is left."""
    k, chunk = 4, 256
    r = simulate(scenario(scheduler__policy="chunked-prefill", scheduler__chunk_size=chunk,
                          scheduler__speculative={"method": "ngram", "num_tokens": k, "acceptance_rate": 0.5},
                          workload__num_requests=80, workload__arrival={"process": "poisson", "rate": 40},
                          workload__prompt_len={"dist": "fixed", "value": 900},
                          workload__output_len={"dist": "fixed", "value": 150}))
    steps = r.steps
    prefill = steps["prefill_tokens"]
    assert (prefill + steps["decode_seqs"] * (1 + k) <= chunk)[prefill > 0].all()
    assert (prefill + steps["decode_seqs"] * (1 + k) == chunk).sum() > 10  # the budget binds
