"""benchmarks/router_check.py: how it reads which server served how many requests, and the
committed results' internal consistency (benchmarks/results/router-check/: no timing)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import router_check as rc

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "router-check"
A, B = "http://127.0.0.1:8021", "http://127.0.0.1:8022"


def test_served_is_each_servers_counter_difference_over_the_run():
    assert rc.served({"before": {A: 10.0, B: 3.0}, "after": {A: 30.0, B: 31.0}}, [A, B]) == [20, 28]
    assert rc.served({"before": {A: 0.0, B: 0.0}, "after": {A: 0.0, B: 5.0}}, [A, B]) == [0, 5]


@pytest.mark.parametrize("watch, why", [
    ({"before": {A: 1.0}, "after": {A: 2.0, B: 3.0}}, "no finished-request counter for http://127.0.0.1:8022"),
    ({"before": {A: 1.0, B: None}, "after": {A: 2.0, B: 3.0}}, "no finished-request counter"),
    ({"before": {A: 5.0, B: 0.0}, "after": {A: 2.0, B: 3.0}}, "went from 5.0 to 2.0"),  # a server restarted
    ({"before": {A: 1.5, B: 0.0}, "after": {A: 2.0, B: 3.0}}, "went from 1.5"),
    ({}, "no finished-request counter"),
])
def test_served_refuses_counters_that_cannot_be_a_runs(watch, why):
    with pytest.raises(ValueError, match=why):
        rc.served(watch, [A, B])


def test_finished_counts_read_vllms_success_counter_over_its_finish_reasons(monkeypatch):
    from endpoint import server_metrics

    body = {A: 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0\n'
               'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 17.0\n'
               'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n',
            B: "# no such counter\nvllm:num_requests_running 0.0\n"}
    monkeypatch.setattr(server_metrics, "get", lambda url, path: body[url].encode() if url in body else None)
    assert rc.finished_counts([A, B, "http://127.0.0.1:9"]) == {A: 20.0, B: None, "http://127.0.0.1:9": None}


def test_split_error_matches_replicas_by_rank():
    assert rc.split_error([0.625, 0.375], [0.375, 0.625]) == 0
    assert rc.split_error([0.5, 0.5], [0.6, 0.4]) == pytest.approx(0.1)
    assert rc.shares([30, 18]) == [0.625, 0.375]
    with pytest.raises(ValueError):
        rc.shares([0, 0])


def test_the_targets_take_the_larger_of_five_percent_and_the_runs_spread():
    row = {"e2e_error": 0.07, "e2e_spread": 0.08, "share_error": 0.05}
    assert rc.met(row) == {"e2e": True, "share": True}
    assert rc.met(row | {"e2e_spread": 0.02, "share_error": 0.051}) == {"e2e": False, "share": False}


def test_cache_aware_is_simulated_with_the_routers_balance_and_cold_rule():
    fragment = {"model": "llama-3-8b", "scheduler": {"policy": "chunked-prefill"}}
    sc = rc.policy_scenario("cache-aware", fragment, Path("."))
    assert sc.replicas == 2 and sc.router.policy == "prefix-affinity" and sc.scheduler.prefix_caching
    flags = rc.POLICIES["cache-aware"]["router"]
    assert sc.router.balance_abs == int(flags[flags.index("--balance-abs-threshold") + 1])
    assert sc.router.no_match == "smallest-record"  # a miss: the radix tree's smallest tenant
    assert rc.policy_scenario("round-robin", fragment, Path(".")).router.policy == "round-robin"


# -- the committed results ------------------------------------------------------------------
def committed():
    if not (RESULTS / "summary.json").is_file():
        pytest.skip("no committed router-check results")
    return json.loads((RESULTS / "summary.json").read_text())


def test_committed_counts_add_up_to_the_runs_requests():
    summary = committed()
    assert {r["workload"] for r in summary["policies"]} == set(rc.POLICIES)
    for r in summary["policies"]:
        w = r["workload"]
        assert len(r["served_real"]) == 2  # two measured runs
        for k, counts in enumerate(r["served_real"], start=1):
            run = json.loads((RESULTS / w / f"run{k}" / "summary.json").read_text())
            assert rc.served(run["watch"], r["workers"]) == counts
            req = pd.read_parquet(RESULTS / w / f"run{k}" / "requests.parquet")
            assert (req["status"] == "finished").all()
            # nothing but the run's own requests reached the servers between the two reads
            assert sum(counts) == len(req) == r["requests"]
            assert rc.shares(counts) == pytest.approx(r["share_real"][k - 1])
        assert sum(r["served_sim"]) == r["requests"]
        assert rc.shares(r["served_sim"]) == pytest.approx(r["share_sim"])
        assert r["share_error"] == pytest.approx(rc.split_error(r["share_sim"], r["share_real"][0]))
        assert r["share_spread"] == pytest.approx(rc.split_error(r["share_real"][0], r["share_real"][1]))


def test_committed_errors_are_the_validations_and_the_readme_says_them():
    summary = committed()
    readme = (RESULTS / "README.md").read_text()
    assert readme == rc.readme(summary)
    for r in summary["policies"]:
        v = json.loads((RESULTS / r["workload"] / "validation.json").read_text())
        assert r["e2e_error"] == pytest.approx(v["errors"]["e2e"]["median"])
        assert r["ttft_error"] == pytest.approx(v["errors"]["ttft"]["median"])
        assert r["e2e_spread"] == pytest.approx(v["run_to_run_spread"]["e2e"]["median"])
        ok = rc.met(r)
        line = next(x for x in readme.splitlines() if x.startswith(f"| {r['workload']} /"))
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert cells[-2:] == ["met" if ok["e2e"] else "missed", "met" if ok["share"] else "missed"]
        assert cells[2] == f"{r['e2e_error']:.1%}"
    assert summary["router"]["version"] == rc.ROUTER_VERSION


def test_validate_keeps_what_watch_read_around_each_run(fake_server, tokenizer_json, tmp_path):
    """``endpoint.validate``'s ``watch``: read just before and just after each measured run
    (not around the speed probes), kept in that run's summary.json."""
    from endpoint.validate import validate
    from sim.scenario.load import scenario_from_dict
    from tests.endpoint.test_validate_known_server import COST, known_profile

    profile = known_profile(tmp_path / "known.json")
    sc = scenario_from_dict({
        "name": "watched", "seed": 3, "model": "tiny-llama-12m", "cost": {"model": "profile", "profile": str(profile)},
        "hardware": {"kv_blocks": COST.kv_blocks},
        "scheduler": {"policy": "chunked-prefill", "chunk_size": COST.budget, "max_num_seqs": COST.max_seqs,
                      "block_size": COST.block_size},
        "workload": {"num_requests": 6, "arrival": {"process": "poisson", "rate": 40},
                     "prompt_len": {"dist": "uniform", "min": 16, "max": 64},
                     "output_len": {"dist": "uniform", "min": 2, "max": 6}}}, "<watched>")
    reads = []

    def watch():
        reads.append(len(reads))
        return {"read": len(reads)}

    validate(sc, profile, fake_server, "fake", source="<watched>", tokenizer=str(tokenizer_json), repeats=2,
             out=tmp_path / "v", log=None, progress=False, watch=watch)
    assert len(reads) == 4
    for k in (1, 2):
        meta = json.loads((tmp_path / "v" / f"run{k}" / "summary.json").read_text())
        assert meta["watch"] == {"before": {"read": 2 * k - 1}, "after": {"read": 2 * k}}
