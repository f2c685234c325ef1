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
    """Each request's simulated replica, its system prompt (numbered in order of first
    appearance) and its prompt length."""
    router = {"policy": "prefix-affinity"} | ({"no_match": no_match} if no_match else {})
    s = scenario(router=router, simulation={"loop": loop}, **FIELDS)
    w = build_workload(s)
    system = np.array([w.prefix_hashes[w.prefix_offsets[i]] for i in range(len(w))])  # its system prompt
    order = {h: k for k, h in enumerate(dict.fromkeys(system))}
    return simulate(s).requests["replica"].to_numpy(), np.array([order[h] for h in system]), w.prompt_len


def smallest_record(prompt, length, shared: int = 512):
    """The rule by hand: a known system prompt goes home; a new one to the replica with the
    fewest prompt tokens routed there beyond the system prompts they matched."""
    home, record, out = {}, [0, 0], []
    for p, n in zip(prompt, length, strict=True):
        known = p in home
        if not known:
            home[p] = int(np.argmin(record))  # ties: the lowest index
        record[home[p]] += int(n) - (shared if known else 0)
        out.append(home[p])
    return np.array(out)


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_a_miss_goes_to_the_smallest_record_and_then_stays(loop):
    replica, prompt, length = routed("smallest-record", loop)
    assert len(set(prompt)) == 4
    expected = smallest_record(prompt, length)
    assert set(expected) == {0, 1}
    np.testing.assert_array_equal(replica, expected)


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_by_default_a_miss_goes_to_the_least_loaded(loop):
    replica, _, _ = routed(None, loop)
    assert (replica == 0).all()  # every replica idle at every arrival: ties go to the lowest index
    again, _, _ = routed("least-loaded", loop)
    assert (again == replica).all()


def test_no_match_is_refused_with_another_policy():
    from sim.errors import InputError

    with pytest.raises(InputError, match="no_match applies only to policy: prefix-affinity"):
        scenario(router={"policy": "round-robin", "no_match": "smallest-record"})
