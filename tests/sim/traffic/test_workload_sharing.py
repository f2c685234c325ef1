"""Prefix-sharing workloads: shared system prompts, multi-turn conversations and Mooncake
hash ids all give each request the ids of its leading full KV blocks, equal exactly when
the tokens up to the end of the block are equal."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.traffic import block_hashes, build_workload
from sim.traffic.block_hashes import mooncake_blocks
from tests.sim.helpers import scenario
from tests.sim.traffic.test_workload_formats import write_mooncake

FIXED = {"dist": "fixed", "value": 40}


def shared_prefix_workload(block_size=16, length=100, **prefix):
    return build_workload(scenario(
        scheduler={"block_size": block_size},
        workload={"num_requests": 400, "arrival": {"process": "poisson", "rate": 10},
                  "prompt_len": {"dist": "uniform", "min": 1, "max": 300},
                  "output_len": FIXED,
                  "shared_prefix": {"num_prompts": 5, "length": length, **prefix}}))


def ids_of(w):
    return [w.block_ids(i) for i in range(len(w))]


def common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


@pytest.mark.parametrize("block_size,length", [(16, 100), (32, 100), (16, 128), (16, 10)])
def test_same_system_prompt_shares_exactly_its_full_blocks(block_size, length):
    w = shared_prefix_workload(block_size, length)
    ids = ids_of(w)
    full = length // block_size
    assert w.prefix_hashes.dtype == np.int64 and w.prefix_offsets.dtype == np.int64
    assert all(len(x) == full for x in ids)
    if full == 0:
        return
    groups: dict[int, list[int]] = {}
    for i, x in enumerate(ids):
        groups.setdefault(int(x[0]), []).append(i)
    assert 1 < len(groups) <= 5
    for members in groups.values():  # same system prompt: all full blocks shared
        assert all(np.array_equal(ids[members[0]], ids[i]) for i in members)
    firsts = [ids[m[0]] for m in groups.values()]
    for a in range(len(firsts)):  # different system prompts: nothing shared
        for b in range(a + 1, len(firsts)):
            assert not set(firsts[a]) & set(firsts[b])


def test_block_size_can_be_given_to_build_workload():
    s = scenario(workload={"num_requests": 20, "arrival": {"process": "poisson", "rate": 10},
                           "shared_prefix": {"num_prompts": 2, "length": 100}})
    assert np.diff(build_workload(s).prefix_offsets).max() == 100 // 16
    assert np.diff(build_workload(s, block_size=32).prefix_offsets).max() == 100 // 32


def test_shared_prefix_adds_its_length_to_the_prompt():
    a = shared_prefix_workload(length=100)
    plain = build_workload(scenario(workload={
        "num_requests": 400, "arrival": {"process": "poisson", "rate": 10},
        "prompt_len": {"dist": "uniform", "min": 1, "max": 300}, "output_len": FIXED}))
    np.testing.assert_array_equal(a.prompt_len, plain.prompt_len + 100)
    np.testing.assert_array_equal(a.arrival, plain.arrival)  # the other streams are unchanged


def test_zipf_popularity_favours_the_first_prompts():
    w = shared_prefix_workload(popularity="zipf", zipf_s=1.5)
    counts = sorted(np.unique(w.prefix_hashes[w.prefix_offsets[:-1]], return_counts=True)[1])
    expected_top = 1 / sum(1 / k**1.5 for k in range(1, 6))  # ≈ 0.58
    assert counts[-1] / len(w) == pytest.approx(expected_top, abs=0.06)


# -- conversations ---------------------------------------------------------------------------
def conversation_workload(n=300, prefix=None, block_size=16, prompt_len=None, **conv):
    wl = {"num_requests": n, "arrival": {"process": "poisson", "rate": 2},
          "prompt_len": prompt_len or {"dist": "uniform", "min": 5, "max": 200},
          "output_len": {"dist": "uniform", "min": 1, "max": 100},
          "conversations": {"turns": {"dist": "uniform", "min": 1, "max": 6},
                            "think_time_s": {"dist": "exponential", "mean": 5}, **conv}}
    if prefix:
        wl["shared_prefix"] = prefix
    return build_workload(scenario(scheduler={"block_size": block_size}, workload=wl))


def sessions(w, mask=None):
    """Each session's requests (its turns, in arrival order)."""
    ids = w.session_id if mask is None else w.session_id[mask]
    for s in np.unique(ids):
        yield np.flatnonzero(w.session_id == s)


def test_conversation_turns_extend_the_previous_context():
    w = conversation_workload()
    assert len(w) == 300 and (np.diff(w.arrival) >= 0).all() and (w.session_id >= 0).all()
    multi = 0
    for turns in sessions(w):
        for prev, cur in pairwise(turns):
            message = w.prompt_len[cur] - w.prompt_len[prev] - w.output_len[prev]
            assert 5 <= message <= 200  # previous prompt + previous output + a new message
            a, b = w.block_ids(prev), w.block_ids(cur)
            assert np.array_equal(b[:len(a)], a)  # turn t's ids extend turn t-1's
            assert len(b) == w.prompt_len[cur] // 16
            multi += 1
    assert multi > 100


def test_conversations_share_nothing_across_sessions_but_the_system_prompt():
    w = conversation_workload(prefix={"num_prompts": 2, "length": 64})
    firsts = [t[0] for t in sessions(w)]
    for i, a in enumerate(firsts[:40]):
        for b in firsts[i + 1:40]:
            shared = common_prefix(w.block_ids(a), w.block_ids(b))
            assert shared in (0, 4)  # 64 // 16 blocks of the system prompt, or none
            rest_a, rest_b = set(w.block_ids(a)[4:]), set(w.block_ids(b)[4:])
            assert not rest_a & rest_b
    plain = conversation_workload()
    a, b = (t[0] for t in list(sessions(plain))[:2])
    assert not set(plain.block_ids(a)) & set(plain.block_ids(b))


def test_think_time_is_counted_from_the_previous_arrival():
    w = conversation_workload(n=100, think_time_s={"dist": "fixed", "value": 3.0},
                              turns={"dist": "fixed", "value": 4})
    for turns in sessions(w):
        np.testing.assert_allclose(np.diff(w.arrival[turns]), 3.0)


def test_max_context_ends_sessions_early():
    w = conversation_workload(max_context=600)
    assert (w.prompt_len + w.output_len <= 600).all()
    assert len(w) == 300


def test_max_context_that_drops_every_session_is_reported():
    with pytest.raises(ScenarioError, match=r"workload\.conversations\.max_context.*no turns"):
        conversation_workload(max_context=50, prompt_len={"dist": "fixed", "value": 60})


def test_conversations_bounded_by_duration():
    w = build_workload(scenario(workload={
        "duration_s": 60.0, "arrival": {"process": "poisson", "rate": 2},
        "conversations": {"turns": {"dist": "fixed", "value": 5},
                          "think_time_s": {"dist": "fixed", "value": 30.0}}}))
    assert w.arrival.max() < 60.0
    assert len(w) == pytest.approx(120 * 1.5, rel=0.2)  # first turns + those within 60 s


def test_conversations_need_generated_traffic():
    with pytest.raises(ScenarioError, match="'conversations' needs generated traffic"):
        scenario(workload={"trace": {"path": "t.csv"}, "conversations": {
            "turns": FIXED, "think_time_s": {"dist": "fixed", "value": 1}}})


# -- Mooncake --------------------------------------------------------------------------------
def test_mooncake_hash_ids_expand_to_our_blocks():
    # requests: [0,1,2] with 1100 tokens, [0,1,5] with 1536, [9,1] with 1024
    offsets = np.array([0, 3, 6, 8])
    hashes = np.array([0, 1, 2, 0, 1, 5, 9, 1])
    prompt = np.array([1100, 1536, 1024])
    off, ids = mooncake_blocks(offsets, hashes, prompt, 512, 16)
    np.testing.assert_array_equal(np.diff(off), [1100 // 16, 96, 64])
    r = [ids[off[i]:off[i + 1]] for i in range(3)]
    assert common_prefix(r[0], r[1]) == 64  # two shared 512-token blocks = 64 of ours
    assert not set(r[0][64:]) & set(r[1][64:])
    assert not set(r[2]) & set(r[0])  # the same id after a different prefix is not shared
    assert len(set(ids)) == len(ids) - 64  # all else distinct
    # larger blocks than the hash blocks: one of ours spans two of theirs
    off, ids = mooncake_blocks(offsets, hashes, prompt, 512, 1024)
    np.testing.assert_array_equal(np.diff(off), [1, 1, 1])
    assert ids[0] == ids[1] != ids[2]


def test_mooncake_hash_ids_beyond_the_list_are_not_invented():
    off, _ = mooncake_blocks(np.array([0, 1]), np.array([4]), np.array([2000]), 512, 16)
    assert off[-1] == 32  # only the first 512 tokens have an id


@pytest.mark.parametrize("block_size", [16, 48, 512])
def test_mooncake_block_ids_follow_the_rule_block_by_block(monkeypatch, block_size):
    """Against the docstring's rule, one block at a time, across the chunks the fast path works in."""
    monkeypatch.setattr(block_hashes, "_CHUNK", 3)
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 6, size=9)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    hashes = rng.integers(0, 4, size=offsets[-1])  # few distinct ids: many shared chains
    prompt = counts * 512 - rng.integers(0, 512, size=9)
    off, ids = mooncake_blocks(offsets, hashes, prompt, 512, block_size)
    for i in range(9):
        chain, prev = [], block_hashes.hash_keys(block_hashes.MOONCAKE)
        for h in hashes[offsets[i]:offsets[i + 1]]:
            prev = block_hashes.extend(prev, h)
            chain.append(prev)
        want = [block_hashes.extend(chain[e // 512], e % 512)[0]
                for e in range(block_size - 1, prompt[i], block_size)]
        np.testing.assert_array_equal(ids[off[i]:off[i + 1]], want)


def test_mooncake_trace_gives_prefix_ids_with_the_scheduler_block_size(tmp_path):
    path = write_mooncake(tmp_path / "m.jsonl")
    w = build_workload(scenario(scheduler={"block_size": 32},
                                workload={"trace": {"path": str(path), "format": "mooncake"}}))
    np.testing.assert_array_equal(np.diff(w.prefix_offsets), [1100 // 32, 700 // 32, 1024 // 32])
    assert common_prefix(w.block_ids(0), w.block_ids(2)) == 32  # both start 0, 1
    with pytest.raises(ScenarioError, match="shared_prefix' cannot be combined"):
        scenario(workload={"trace": {"path": str(path), "format": "mooncake"},
                           "shared_prefix": {"num_prompts": 1, "length": 64}})


def test_prefix_ids_are_deterministic_and_survive_class_merging():
    a, b = conversation_workload(), conversation_workload()
    np.testing.assert_array_equal(a.prefix_hashes, b.prefix_hashes)
    conv = {"name": "chat", "num_requests": 100, "arrival": {"process": "poisson", "rate": 2},
            "conversations": {"turns": {"dist": "fixed", "value": 3},
                              "think_time_s": {"dist": "fixed", "value": 1}}}
    sys = {"name": "api", "num_requests": 100, "arrival": {"process": "poisson", "rate": 5},
           "shared_prefix": {"num_prompts": 3, "length": 48}}
    plain = {"name": "plain", "num_requests": 50, "arrival": {"process": "poisson", "rate": 1}}
    w = build_workload(scenario(workload={"classes": [conv, sys, plain]}))
    counts = np.diff(w.prefix_offsets)
    assert (counts[w.class_id == 1] == 3).all() and (counts[w.class_id == 2] == 0).all()
    assert (w.session_id[w.class_id != 0] == -1).all()
    assert (w.session_id[w.class_id == 0] >= 0).all()
    for turns in sessions(w, w.class_id == 0):
        for prev, cur in pairwise(turns):
            a, b = w.block_ids(prev), w.block_ids(cur)
            assert np.array_equal(b[:len(a)], a)

