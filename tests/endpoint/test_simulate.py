import heapq

import numpy as np

from endpoint.simulate import simulate_measured
from sim.pricing.profile import Device, LinearFit, Ops, Profile, Table, save_profile
from sim.scenario.load import scenario_from_dict
from sim.traffic import build_workload


def closed_sends(completion: np.ndarray, users: int, think_s: float) -> np.ndarray:
    """The closed-loop rule: requests in order, each to the first user free again (its
    previous request completed, plus the think time)."""
    free = [0.0] * users
    out = np.empty(len(completion))
    for k in range(len(completion)):
        out[k] = heapq.heappop(free)
        heapq.heappush(free, float(completion[k]) + think_s)
    return out


def test_closed_sends_take_requests_in_order():
    done = np.array([5.0, 2.0, 9.0, 8.0, 7.0])
    s = closed_sends(done, 2, 0.5)
    # r0, r1 at 0; r2 when r1 is done (2 + 0.5 think); r3 when r0 is; r4 when r3 is (not r2)
    assert list(s) == [0.0, 0.0, 2.5, 5.5, 8.5]


def profile(tmp_path, overhead=0.0):
    step = LinearFit(features=["const", "num_tokens", "num_seqs"], coef=[0.01, 1e-4, 1e-3], r2=1.0)
    p = Profile(schema_version=1, source="endpoint", created="now", device=Device(name="t", type="cpu"),
                model="tiny-llama-12m", model_shape={}, dtype="fp32", ops=Ops(linear=Table(x=[1, 2], seconds=[0, 0])),
                step=step, prefer="step", request_overhead_s=overhead)
    return save_profile(p, tmp_path / f"p{overhead}.json")


def scenario(path, arrival):
    return scenario_from_dict({"model": "tiny-llama-12m", "cost": {"model": "profile", "profile": str(path)},
                               "scheduler": {"policy": "chunked-prefill", "chunk_size": 256, "max_num_seqs": 8},
                               "workload": {"num_requests": 12, "arrival": arrival,
                                            "prompt_len": {"dist": "fixed", "value": 64},
                                            "output_len": {"dist": "fixed", "value": 8}}}, "<t>")


def test_request_overhead_adds_to_ttft_and_e2e_only(tmp_path):
    sc0 = scenario(profile(tmp_path), {"process": "poisson", "rate": 0.5})
    sc1 = scenario(profile(tmp_path, 0.05), {"process": "poisson", "rate": 0.5})
    w = build_workload(sc0)
    a = simulate_measured(sc0, w, w.arrival).requests
    b = simulate_measured(sc1, w, w.arrival).requests
    np.testing.assert_allclose(b["arrival"], a["arrival"])
    np.testing.assert_allclose(b["ttft"] - a["ttft"], 0.05, atol=1e-9)  # sparse load: no interaction
    np.testing.assert_allclose(b["e2e"] - a["e2e"], 0.05, atol=1e-9)
    np.testing.assert_allclose(b["tpot"], a["tpot"])


def test_closed_loop_with_request_overhead_follows_the_rule(tmp_path):
    sc = scenario(profile(tmp_path, 0.01), {"process": "closed", "concurrency": 3, "think_time_s": 0.1})
    w = build_workload(sc)
    r = simulate_measured(sc, w, w.arrival, closed=3, think_s=0.1).requests
    sends = r["arrival"].to_numpy()
    t0 = sends[0]  # the first wave (the users start together)
    done = sends + r["e2e"].to_numpy()  # when each user has its answer
    np.testing.assert_allclose(sends - t0, closed_sends(done - t0, 3, 0.1), atol=1e-9)
    assert (sends[:3] == t0).all() and (sends[3:] > t0).all()
    assert (r["ttft"] > 0.01).all()  # the overhead counts in TTFT


def test_request_overhead_keeps_the_kv_tiers_summary(tmp_path):
    """The overhead shifts the request table and its summary is made again: the run's tiers stay."""
    path = profile(tmp_path, 0.05)
    data = {"model": "tiny-llama-12m", "cost": {"model": "profile", "profile": str(path)},
            "hardware": {"kv_blocks": 8}, "kv_tiers": {"tiers": [{"medium": "cpu", "capacity_gb": 1.0}]},
            "scheduler": {"policy": "chunked-prefill", "chunk_size": 256, "max_num_seqs": 4, "block_size": 16,
                          "prefix_caching": True},
            "workload": {"num_requests": 24, "arrival": {"process": "poisson", "rate": 2.0},
                         "prompt_len": {"dist": "fixed", "value": 32}, "output_len": {"dist": "fixed", "value": 4},
                         "conversations": {"turns": {"dist": "fixed", "value": 3},
                                           "think_time_s": {"dist": "fixed", "value": 1.0}}}}
    sc = scenario_from_dict(data, "<t>")
    w = build_workload(sc)
    s = simulate_measured(sc, w, w.arrival).summary
    assert s["kv_tiers"]["tiers"]["cpu"]["hit_tokens"] > 0
    assert s["prefix_hit_rate"] > 0


def test_a_scenario_sets_the_request_overhead_over_its_profiles(tmp_path):
    from sim.pricing import request_overhead_s

    sc = scenario(profile(tmp_path, 0.05), {"process": "poisson", "rate": 0.5})
    assert request_overhead_s(sc) == 0.05
    data = sc.model_dump(mode="json", exclude={"base_dir"}, exclude_unset=True)
    data["engine"] = {"name": "vllm", "request_overhead_s": 0.0}
    assert request_overhead_s(scenario_from_dict(data, "<t>")) == 0.0
