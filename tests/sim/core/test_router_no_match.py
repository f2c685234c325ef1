"""prefix-affinity's ``no_match``: where a prompt whose prefix no replica is known to hold goes
(the least loaded replica, or the one with the smallest record, as vLLM's and SGLang's
cache_aware routers send a miss to their radix tree's smallest tenant)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.loops.run import simulate
from sim.traffic import build_workload
from tests.sim.helpers import scenario

# Requests far apart (each done before the next arrives): every replica idle at every arrival,
# so the least-loaded rule always ties and picks replica 0.
FIELDS = {"replicas": 2, "scheduler__prefix_caching": True,
          "workload__num_requests": 40, "workload__arrival": {"process": "poisson", "rate": 0.05},
          "workload__shared_prefix": {"num_prompts": 4, "length": 512},
          "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 64},
          "workload__output_len": {"dist": "uniform", "min": 1, "max": 8}}


def routed(no_match: str | None, loop: str):
    router = {"policy": "prefix-affinity"} | ({"no_match": no_match} if no_match else {})
    s = scenario(router=router, simulation={"loop": loop}, **FIELDS)
    w = build_workload(s)
    system = np.array([w.prefix_hashes[w.prefix_offsets[i]] for i in range(len(w))])  # its system prompt
    order = {h: k for k, h in enumerate(dict.fromkeys(system))}  # in order of first appearance
    return simulate(s).requests["replica"].to_numpy(), np.array([order[h] for h in system])


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_a_miss_goes_to_the_smallest_record_and_then_stays(loop):
    replica, prompt = routed("smallest-record", loop)
    assert len(set(prompt)) == 4
    home = {p: set(replica[prompt == p]) for p in range(4)}
    assert all(len(h) == 1 for h in home.values())  # each system prompt stays where it first went
    # first prompt: both records empty, replica 0; second: replica 1 holds none; third: both
    # hold one prompt's blocks, replica 0; fourth: replica 1
    assert [home[p].pop() for p in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_by_default_a_miss_goes_to_the_least_loaded(loop):
    replica, _ = routed(None, loop)
    assert (replica == 0).all()  # every replica idle at every arrival: ties go to the lowest index
    again, _ = routed("least-loaded", loop)
    assert (again == replica).all()


def test_no_match_is_refused_with_another_policy():
    from sim.errors import InputError

    with pytest.raises(InputError, match="no_match applies only to policy: prefix-affinity"):
        scenario(router={"policy": "round-robin", "no_match": "smallest-record"})
