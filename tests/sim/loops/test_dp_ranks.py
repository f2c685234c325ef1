"""Attention DP ranks (sim/core/lockstep.py): one engine per rank, with its own queue, share of
the scheduler's limits and KV cache, requests handed to the ranks in turn, and every rank's
step starting and ending together, as long as the slowest rank's (and an idle rank waiting
with them)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.plan import SHAPE_SIZE, Shape, StepShape
from sim.core.state import engines_of
from sim.loops.run import simulate
from sim.pricing import Pricer
from sim.pricing.roofline import NO_OVERHEAD, RooflineCost
from sim.scenario.specs import get_gpu, get_model
from tests.sim.helpers import scenario

WIDE = {"gpu": "H100-SXM", "tp": 4, "expert_parallel": True, "dp_attention": 4}


def wide(**fields):
    return scenario(model="qwen3-30b-a3b", hardware=dict(WIDE, **fields.pop("hardware", {})), **fields)


def test_each_rank_is_an_engine_with_its_share_of_the_limits_and_the_cache():
    s = wide(scheduler={"max_num_seqs": 64, "max_batched_tokens": 4096})
    ranks = engines_of(s)
    assert len(ranks) == 4 and all(x.lockstep and x.replica == 0 for x in ranks)
    assert {x.scheduler.max_num_seqs for x in ranks} == {16}
    assert {x.scheduler.max_batched_tokens for x in ranks} == {1024}
    assert {x.num_blocks for x in ranks} == {s.replica_specs[0].memory.num_blocks // 4}
    one = scenario(model="qwen3-30b-a3b", hardware={"gpu": "H100-SXM", "tp": 4, "expert_parallel": True})
    assert [x.lockstep for x in engines_of(one)] == [False]


def test_ranks_step_together_and_requests_go_to_them_in_turn():
    r = simulate(wide(workload={"num_requests": 120, "arrival": {"process": "poisson", "rate": 30},
                                "prompt_len": {"dist": "uniform", "min": 16, "max": 2000},
                                "output_len": {"dist": "uniform", "min": 1, "max": 200}}))
    steps = r.steps
    assert set(steps["engine"]) == {0, 1, 2, 3}
    # a step of one rank either is a step of every rank stepping then (same start, same length) or
    # overlaps none of theirs: the ranks never step apart
    by_start = steps.groupby("start")["duration"].agg(["min", "max"])
    assert (by_start["min"] == by_start["max"]).all()
    starts, ends = by_start.index.to_numpy(), (by_start.index + by_start["max"]).to_numpy()
    assert np.all(ends[:-1] <= starts[1:] + 1e-12)
    # round-robin over the ranks: request i waits at rank i mod 4
    req = r.requests.sort_values("request_id")
    assert (req["arrival_engine"].to_numpy() == np.arange(len(req)) % 4).all()
    assert (steps["num_seqs"] <= 256 // 4).all()


def test_an_idle_rank_waits_for_a_busy_one():
    """A long prompt on one rank holds up the others: three short requests on the other ranks,
    sent with it, take longer from end to end than when it is as short as theirs."""
    def run(long_prompt: int):
        stream = {"arrival": {"process": "constant", "rate": 100}, "output_len": {"dist": "fixed", "value": 50}}
        return simulate(wide(scheduler={"policy": "chunked-prefill", "chunk_size": 16384, "max_num_seqs": 64},
                             workload={"classes": [
                                 dict(stream, name="long", num_requests=1,
                                      prompt_len={"dist": "fixed", "value": long_prompt}),
                                 dict(stream, name="short", num_requests=3,
                                      prompt_len={"dist": "fixed", "value": 100})]}))
    even, uneven = run(100), run(4000)
    ranks = uneven.requests["arrival_engine"]
    assert sorted(ranks) == [0, 1, 2, 3]  # one request per rank
    short = lambda r: r.requests[r.requests["class"] == "short"]["e2e"]  # noqa: E731
    assert short(uneven).min() > short(even).max()


def _price(shapes, dp=4):
    cost = RooflineCost(get_model("qwen3-30b-a3b"), get_gpu("H100-SXM"), tp=4, expert_parallel=True, dp=dp,
                        engine=NO_OVERHEAD)
    return Pricer(cost).price_group(np.asarray(shapes, dtype=np.float64)), Pricer(cost)


def _decode(rows: int, context: int = 1000) -> np.ndarray:
    s = np.zeros(SHAPE_SIZE)
    s[Shape.NUM_TOKENS] = s[Shape.NUM_SEQS] = s[Shape.DECODE_SEQS] = s[Shape.NUM_SAMPLED] = rows
    s[Shape.DECODE_CONTEXT] = rows * context
    return s


def test_even_ranks_cost_what_the_replica_step_costs_and_the_slowest_sets_the_step():
    even, pricer = _price([_decode(8)] * 4)
    merged = _decode(32)
    single, _ = pricer.price(merged[None, :])
    assert even == pytest.approx(float(single[0]), rel=1e-12)  # spread evenly: the replica's step
    uneven, _ = _price([_decode(32), _decode(0), _decode(0), _decode(0)])
    assert uneven > even  # the same tokens on one rank: its attention and dense layers take 4× as long
    alone, _ = _price([_decode(8)])
    assert alone < even  # fewer tokens for the experts, the same per rank


def test_every_rank_commits_and_both_loops_count_the_same_steps():
    s = dict(workload={"num_requests": 60, "arrival": {"process": "poisson", "rate": 40}})
    ref = simulate(wide(simulation={"loop": "simpy"}, **s))
    fast = simulate(wide(simulation={"loop": "compiled"}, **s))
    assert ref.events == fast.events == len(ref.steps) == len(fast.steps)
    assert ref.requests["e2e"].tolist() == fast.requests["e2e"].tolist()


def test_each_rank_stands_for_its_own_gpus_in_the_energy():
    from sim.results.energy import scenario_power

    fleet = scenario_power(wide())
    assert fleet.tp.tolist() == [1.0] * 4  # four ranks of one GPU each: the replica's 4 GPUs once


def test_kv_tiers_with_attention_dp_are_refused_by_name():
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"kv_tiers.*attention DP"):
        wide(scheduler={"prefix_caching": True},
             kv_tiers={"tiers": [{"medium": "cpu", "capacity_gb": 8}]})


def test_the_engines_time_per_request_is_the_busiest_ranks():
    """Each rank's scheduler is a process of its own: the per-request host time of a step of four
    ranks of 8 rows is that of 8 rows, not 32."""
    from sim.scenario.engines import EngineCost

    def group(row_s):
        cost = RooflineCost(get_model("qwen3-30b-a3b"), get_gpu("H100-SXM"), tp=4, expert_parallel=True, dp=4,
                            engine=EngineCost(row_overhead_s=row_s))
        return Pricer(cost).price_group(np.stack([_decode(8)] * 4))

    assert group(1e-3) - group(0.0) == pytest.approx(8e-3, rel=1e-9)


def test_a_rank_reserves_activations_for_its_own_step():
    from sim.scenario.memory import activation_reserve_bytes

    s = wide(scheduler={"max_num_seqs": 64, "max_batched_tokens": 16384})
    mem = s.replica_specs[0].memory
    assert mem.activation_bytes == pytest.approx(activation_reserve_bytes(s.model_spec, 4096, 16, 1))


def test_split_experts_move_only_their_own_tokens_activations():
    """With experts split over the GPUs (expert parallelism) each GPU moves the activations of the
    tokens routed to its experts; with every expert split by columns, every token's."""
    step = _decode(8192)
    step[Shape.DECODE_SEQS] = step[Shape.DECODE_CONTEXT] = 0.0
    step[Shape.PREFILL_TOKENS] = 8192.0
    moe = {ep: RooflineCost(get_model("qwen3-30b-a3b"), get_gpu("H100-SXM"), tp=8, expert_parallel=ep)
           .op_times(StepShape(*step))["moe_mlp"] for ep in (True, False)}
    assert moe[True] < moe[False]


def test_every_rank_finishing_at_once_in_a_closed_loop_runs_alike_in_both_loops():
    """A closed loop of equal requests: all the ranks' requests finish at the same step end, and
    each user sends the next at once (the compiled loop keeps room on its heap for a whole group's)."""
    s = dict(hardware=dict(WIDE, tp=8, dp_attention=8), scheduler={"max_num_seqs": 256},
             workload={"num_requests": 1024, "arrival": {"process": "closed", "concurrency": 256},
                       "prompt_len": {"dist": "fixed", "value": 64}, "output_len": {"dist": "fixed", "value": 8}})
    ref = simulate(wide(simulation={"loop": "simpy"}, **s))
    fast = simulate(wide(simulation={"loop": "compiled"}, **s))
    assert (ref.requests["status"] == "finished").all()
    assert ref.requests["e2e"].tolist() == fast.requests["e2e"].tolist()
    assert ref.steps["start"].tolist() == fast.steps["start"].tolist()


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_shortest_queue_sends_a_request_to_the_least_loaded_rank(loop):
    """Two ranks: a long request holds rank 0 while short ones come and go. In turn, the second
    short one waits on rank 0 beside the long one; by shortest queue it takes the idle rank 1."""
    def ranks(balance: str):
        s = wide(hardware={"tp": 2, "dp_attention": 2, "dp_balance": balance}, simulation={"loop": loop},
                 workload={"classes": [
                     {"name": "long", "num_requests": 1, "arrival": {"process": "constant", "rate": 100},
                      "prompt_len": {"dist": "fixed", "value": 100}, "output_len": {"dist": "fixed", "value": 400}},
                     {"name": "short", "num_requests": 3, "arrival": {"process": "constant", "rate": 2},
                      "prompt_len": {"dist": "fixed", "value": 100}, "output_len": {"dist": "fixed", "value": 5}}]})
        r = simulate(s).requests.sort_values("arrival")
        assert r["class"].tolist() == ["long", "short", "short", "short"]
        assert r["e2e"].iloc[0] > r["arrival"].iloc[-1]  # the long one runs past the last arrival
        return r["arrival_engine"].tolist()

    assert ranks("round-robin") == [0, 1, 0, 1]
    assert ranks("shortest-queue") == [0, 1, 1, 1]


def test_dp_balance_without_ranks_is_refused_by_name():
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"hardware\.dp_balance"):
        scenario(hardware={"dp_balance": "shortest-queue"})
