"""Routers on sampled load (sim/core/router_signals.py): a router that reads the engines' metrics
sees the replicas as last sampled, maybe late, maybe plus what it routed since; refresh_s 0 is
the exact state; refreshes stop when nothing is left to come."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sim.loops.run as run_module
from sim.core.calls import CoreCalls
from sim.core.handlers import PUBLISH, REFRESH
from sim.core.state import FRONT, Counter, RouterTime, Routing, Setting
from sim.loops.run import _Run, simulate
from tests.sim.helpers import scenario

# 30 requests within 6 ms: one scrape interval, even the default one
BURST = {"replicas": 3, "workload__num_requests": 30, "workload__arrival": {"process": "constant", "rate": 5000}}


def calls(**router) -> CoreCalls:
    return CoreCalls(_Run(scenario(router={"policy": "least-kv", **router}, **BURST)).core)


def route(core: CoreCalls, rid: int, now: float) -> int:
    core.submit(rid, now)
    return int(core.c.req.replica[rid])


def exact_choice(core: CoreCalls) -> int:
    """least-kv on the exact state, computed here: lowest KV load, then fewest queued (nothing
    has run, so the load is the queued prompts' blocks)."""
    c = core.c
    load = c.counters[:, Counter.QUEUED_BLOCKS] / c.settings[:, Setting.NUM_BLOCKS]
    queued = c.counters[:, Counter.NWAIT]
    return int(np.lexsort((np.arange(len(load)), queued, load))[0])


def test_refresh_0_is_the_exact_state():
    core = calls(refresh_s=0)
    chosen = []
    for rid in range(12):
        expected = exact_choice(core)
        chosen.append(route(core, rid, 0.001 * rid))
        assert chosen[-1] == expected
    assert set(chosen) == {0, 1, 2}
    assert not core.c.routers[FRONT, Routing.SAMPLED] and core.c.router_times[RouterTime.REFRESH_S] == 0


def test_a_stale_router_herds_a_burst_that_adding_its_own_routing_spreads():
    stale = calls(refresh_s=1.0)
    assert {route(stale, rid, 0.001 * rid) for rid in range(12)} == {0}  # the idle fleet of t=0, all tied
    own = calls(refresh_s=1.0, add_routed=True)
    assert {route(own, rid, 0.001 * rid) for rid in range(12)} == {0, 1, 2}


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_a_sample_is_seen_delay_s_after_it_was_taken(delay):
    core = calls(refresh_s=1.0, delay_s=delay)
    assert {route(core, rid, 0.1) for rid in range(5)} == {0}
    core.handle(REFRESH, -1, 1.0)  # replica 0 holds five prompts now
    fx = core.effects()
    assert fx[-1] == (REFRESH, -1, 1.0)  # requests are still to come
    assert core.c.router_times[RouterTime.NEXT_REFRESH] == 2.0
    if delay:
        assert fx[0][0] == PUBLISH and fx[0][2] == delay
        assert route(core, 5, 1.2) == 0  # the sample of t=1 is not seen yet
        core.handle(PUBLISH, fx[0][1], 1.0 + delay)
    assert route(core, 6, 1.6) == 1


def test_routers_that_count_their_own_requests_are_exact_by_default():
    for policy in ("least-outstanding", "power-of-two", "prefix-affinity", "round-robin"):
        core = CoreCalls(_Run(scenario(router={"policy": policy}, **BURST)).core)
        assert not core.c.routers[FRONT, Routing.SAMPLED]
        assert core.c.router_times[RouterTime.REFRESH_S] == 0
    core = calls()
    assert core.c.routers[FRONT, Routing.SAMPLED] and core.c.router_times[RouterTime.REFRESH_S] == 0.05
    assert CoreCalls(_Run(scenario(router={"policy": "power-of-two", "refresh_s": 1}, **BURST)).core).c.routers[
        FRONT, Routing.ADD_ROUTED]


def shares(result) -> list[int]:
    return np.bincount(result.requests["replica"].to_numpy(), minlength=3).tolist()


@pytest.mark.parametrize("loop", ["simpy", "compiled"])
def test_a_burst_herds_onto_one_replica_behind_a_stale_least_kv_router(loop):
    stale = simulate(scenario(router={"policy": "least-kv", "refresh_s": 1.0}, simulation={"loop": loop}, **BURST))
    exact = simulate(scenario(router={"policy": "least-kv", "refresh_s": 0}, simulation={"loop": loop}, **BURST))
    assert shares(stale) == [30, 0, 0]
    assert min(shares(exact)) >= 8
    assert stale.summary["ttft_p50"] > exact.summary["ttft_p50"]


@pytest.mark.parametrize("arrival", [{"process": "poisson", "rate": 20},
                                     {"process": "closed", "concurrency": 6, "think_time_s": 0.3}])
@pytest.mark.parametrize("loop", ["simpy", "compiled"])
def test_refreshes_stop_when_nothing_is_left_to_come(loop, arrival, monkeypatch):
    cores = []
    build = run_module.build_core

    def keep(*args, **kwargs):
        cores.append(build(*args, **kwargs))
        return cores[-1]

    monkeypatch.setattr(run_module, "build_core", keep)
    refresh = 0.25
    result = simulate(scenario(router={"policy": "least-kv", "refresh_s": refresh}, replicas=2,
                               simulation={"loop": loop}, workload__arrival=arrival))
    c = cores[0]
    assert c.router_times[RouterTime.NEXT_REFRESH] == math.inf
    end = result.requests["completion"].max()
    taken = int(c.routers[FRONT, Routing.SAMPLES])
    assert end / refresh - 1 <= taken <= end / refresh + 1  # one every refresh_s until the last request is done
