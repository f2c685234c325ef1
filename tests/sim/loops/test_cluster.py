"""Fleet features, each by its mechanism: routers, heterogeneous replicas, disaggregation,
parallelism, swap, quantization, speculative decoding, mixture of experts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.core.plan import StepShape
from sim.loops.run import drive, simulate
from sim.pricing import make_cost_model
from sim.scenario.memory import memory_budget
from sim.scenario.specs import efficiency, get_gpu, get_model
from tests.sim.helpers import scenario

LONE = {"workload__num_requests": 1,
        "workload__prompt_len": {"dist": "fixed", "value": 1000},
        "workload__output_len": {"dist": "fixed", "value": 20}}


def finished_all(r):
    assert (r.requests["status"] == "finished").all(), r.requests["status"].value_counts()


# -- routers ---------------------------------------------------------------------------------
def test_round_robin_spreads_requests_evenly():
    r = simulate(scenario(replicas=4))
    counts = r.requests["replica"].value_counts()
    assert set(counts.index) == {0, 1, 2, 3} and counts.max() - counts.min() <= 1


@pytest.mark.parametrize("router", ["least-outstanding", "least-kv", "power-of-two"])
def test_load_aware_routers_favour_the_faster_replica(router):
    s = scenario(router={"policy": router},
                 replica_groups=[{"count": 1, "hardware": {"gpu": "B200"}},
                                 {"count": 1, "hardware": {"gpu": "A100-80GB"}}],
                 workload__arrival={"process": "poisson", "rate": 30}, workload__num_requests=600)
    r = simulate(s)
    finished_all(r)
    counts = r.requests["replica"].value_counts()
    assert counts[0] > counts[1], counts  # the B200 drains its queue faster, so gets more


def test_least_kv_counts_the_blocks_queued_prompts_will_take():
    """A burst must not herd onto the replica whose KV share is lowest only because no step has
    admitted what was just routed there: least-kv's tail TTFT on the exact state stays near
    round-robin's (sampled, it herds between samples: tests/sim/core/test_router_signals.py)."""
    from sim.scenario.load import load_scenario

    burst = ["workload.arrival.cv=3", "hardware.memory_utilization=0.9", "workload.arrival.rate=40",
             "workload.output_len.mean=250", "workload.output_len.sigma=0.8", "workload.output_len.max=1024",
             "workload.prompt_len.sigma=1.0", "workload.num_requests=2000"]
    path = Path(__file__).resolve().parents[3] / "scenarios" / "router-least-kv.yaml"
    lkv = simulate(load_scenario(path, [*burst, "router.refresh_s=0"])).summary
    rr = simulate(load_scenario(path, [*burst, "router.policy=round-robin"])).summary
    assert lkv["ttft_p99"] <= 1.2 * rr["ttft_p99"], (lkv["ttft_p99"], rr["ttft_p99"])


def test_heterogeneous_replicas_have_their_own_speed():
    s = scenario(replica_groups=[{"count": 1, "hardware": {"gpu": "H200"}},
                                 {"count": 1, "hardware": {"gpu": "A100-40GB"}}])
    r = simulate(s)
    tpot = r.requests.groupby("replica")["tpot"].median()
    assert tpot[0] < tpot[1]
    assert s.replica_specs[0].memory.num_blocks > s.replica_specs[1].memory.num_blocks
    assert s.num_gpus == 2


def test_power_of_two_is_seeded():
    fields = {"router": {"policy": "power-of-two"}, "replicas": 4}
    a = simulate(scenario(seed=1, **fields)).requests["replica"]
    b = simulate(scenario(seed=1, **fields)).requests["replica"]
    assert a.equals(b)


# -- disaggregation --------------------------------------------------------------------------
DISAGG = {"disaggregation": {"prefill": {"count": 1}, "decode": {"count": 1},
                             "link": {"type": "ethernet"}}}


def test_kv_transfer_time_is_bytes_over_bandwidth_plus_latency():
    s = scenario(**DISAGG, **LONE)
    r = simulate(s)
    finished_all(r)
    row = r.requests.iloc[0]
    m = s.model_spec
    nbytes = 1000 * m.kv_bytes_per_token()
    wire = nbytes / 12.5e9 + 30e-6
    prefill = make_cost_model(s).step_time(StepShape(1000, 1, 1000, 1000 * 1000, 0, 0, 1))
    assert row["ttft"] == pytest.approx(prefill + wire, rel=1e-9)  # TTFT includes the transfer
    assert row["replica"] == 1  # decoded on the decode replica


def test_layerwise_overlap_hides_the_transfer_behind_the_prefill():
    plain = simulate(scenario(**DISAGG, **LONE)).requests.iloc[0]["ttft"]
    over = {"disaggregation": {**DISAGG["disaggregation"],
                               "link": {"type": "ethernet", "layerwise_overlap": True}}}
    overlapped = simulate(scenario(**over, **LONE)).requests.iloc[0]["ttft"]
    assert overlapped < plain


def test_transfer_time_scales_with_tensor_parallel_senders():
    from sim.core.requests import RequestTable
    from sim.core.state import build_core, core_ref
    from sim.pricing.links import transfer_seconds

    def wire(tp: int) -> float:
        s = scenario(disaggregation={"prefill": {"count": 1, "hardware": {"tp": tp}}, "decode": {"count": 1},
                                     "link": {"type": "ethernet"}}, **LONE)
        t = RequestTable(np.zeros(1), np.array([1000]), np.array([5]))
        t.num_computed[0] = 1000
        core = build_core(s, t)
        t.source[0], t.replica[0] = 0, 1  # handed over by the prefill replica's engine to the decode one
        return transfer_seconds(core_ref(core), 0, 0.0) - 30e-6

    assert wire(2) == pytest.approx(wire(1) / 2)


def test_selective_disaggregation_prefills_short_prompts_on_the_decode_replica():
    """Dynamo's conditional disaggregation: prompts of at most local_prefill_tokens uncached
    tokens are prefilled where they decode; longer ones go through a prefill replica, and their
    KV cache comes back to the decode replica chosen on arrival."""
    base = {"disaggregation": {"prefill": {"count": 1}, "decode": {"count": 2}, "local_prefill_tokens": 300},
            "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 900}}
    r = simulate(scenario(**base))
    finished_all(r)
    q = r.requests
    local = q["arrival_engine"] >= 1  # queued on arrival at a decode replica (prefill is engine 0)
    assert local.any() and (~local).any()
    assert (q.loc[local, "prompt_tokens"] <= 300).all() and (q.loc[~local, "prompt_tokens"] > 300).all()
    assert (q.loc[q["max_output_tokens"] > 1, "replica"] >= 1).all()  # all decode on the decode pool
    # a long prefill queue sends the long prompts to the decode replicas too
    busy = simulate(scenario(**{**base, "disaggregation": {**base["disaggregation"], "max_prefill_queue": 0},
                                "workload__arrival": {"process": "poisson", "rate": 60}}))
    long_local = (busy.requests["arrival_engine"] >= 1) & (busy.requests["prompt_tokens"] > 300)
    assert long_local.any()
    with pytest.raises(Exception, match="local_prefill_tokens"):
        scenario(disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}, "max_prefill_queue": 3})


def test_transfers_queue_on_the_links_they_share():
    """Two prefill replicas hand one request each to one decode replica at once: its link takes
    them one after the other; a third from a prefill replica whose link is free still waits for
    the decode replica's."""
    from sim.core.requests import RequestTable
    from sim.core.state import build_core, core_ref
    from sim.pricing.links import transfer_seconds

    s = scenario(disaggregation={"prefill": {"count": 3}, "decode": {"count": 2}, "link": {"type": "ethernet"}},
                 **LONE)
    t = RequestTable(np.zeros(4), np.full(4, 1000), np.full(4, 5))
    t.num_computed[:] = 1000
    core = build_core(s, t)
    t.source[:] = [0, 1, 2, 2]
    t.replica[:] = [3, 3, 3, 4]
    c = core_ref(core)
    one = transfer_seconds(c, 0, 0.0)
    wire = one - 30e-6
    assert transfer_seconds(c, 1, 0.0) == pytest.approx(2 * wire + 30e-6)  # after the first, on replica 3's link
    assert transfer_seconds(c, 2, 0.5 * wire) == pytest.approx(2.5 * wire + 30e-6)  # replica 3's link is busy till 3 w
    # prefill replica 2's link is busy until 3 wires too: the decode replica 4 waits for it
    assert transfer_seconds(c, 3, 0.0) == pytest.approx(4 * wire + 30e-6)


@pytest.mark.parametrize("model", ["gemma-3-27b", "gpt-oss-20b", "qwen3-next-80b-a3b"])
def test_a_hand_off_sends_what_the_prefill_engine_holds(model):
    """Windowed layers send their last window (+ a block), linear-attention layers their state:
    the wire carries ``kv_bytes_of_request`` (sim/scenario/specs/kv_bytes.py), not every token in
    every layer."""
    from sim.core.requests import RequestTable
    from sim.core.state import build_core, core_ref
    from sim.pricing.links import transfer_seconds

    s = scenario(model=model, hardware={"gpu": "H200", "tp": 2},
                 disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}, "link": {"type": "ethernet"}},
                 **LONE)
    t = RequestTable(np.zeros(1), np.array([5000]), np.array([5]))
    t.num_computed[0] = 5000
    core = build_core(s, t)
    t.source[0], t.replica[0] = 0, 1
    m = s.model_spec
    nbytes = m.kv_bytes_of_request(5000, 16)
    assert transfer_seconds(core_ref(core), 0, 0.0) == pytest.approx(nbytes / (2 * 12.5e9) + 30e-6, rel=1e-12)
    full, windowed = m.kv_bytes_per_token_split()
    if windowed:
        assert nbytes < 5000 * (full + windowed) - 3000 * windowed  # most windowed tokens stay behind
    else:
        assert nbytes > 5000 * full  # the state goes too


def test_decode_admission_waits_for_blocks():
    # A decode replica with little KV memory must queue prefilled requests until blocks free up.
    s = scenario(disaggregation={"prefill": {"count": 2},
                                 "decode": {"count": 1, "hardware": {"memory_utilization": 0.235}}},
                 workload__arrival={"process": "poisson", "rate": 40},
                 workload__output_len={"dist": "uniform", "min": 200, "max": 400})
    r = simulate(s)
    finished_all(r)
    decode_steps = r.steps[r.steps["replica"] == 2]
    assert decode_steps["kv_blocks_used"].max() <= s.replica_specs[2].memory.num_blocks
    assert decode_steps["queue_len"].max() > 0
    prefill_steps = r.steps[r.steps["replica"] < 2]
    assert (prefill_steps["decode_seqs"] == 0).all()  # prefill replicas never decode


# -- parallelism -----------------------------------------------------------------------------
def test_tensor_parallel_halves_per_gpu_weights_and_kv():
    m, g = get_model("llama-3-70b"), get_gpu("H100-SXM")
    two = memory_budget(m, g, tp=2)
    four = memory_budget(m, g, tp=4)
    assert four.weight_bytes == pytest.approx(two.weight_bytes / 2)
    assert four.kv_bytes_per_token == pytest.approx(two.kv_bytes_per_token / 2)


def test_pipeline_parallel_splits_memory_and_shows_bubbles():
    m, g = get_model("llama-3-70b"), get_gpu("H100-SXM")
    assert memory_budget(m, g, tp=2, pp=2).weight_bytes == pytest.approx(
        memory_budget(m, g, tp=4).weight_bytes)
    s = scenario(model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 2, "pp": 2},
                 workload__arrival={"process": "poisson", "rate": 6}, workload__num_requests=120)
    r = simulate(s)
    finished_all(r)
    # Two micro-batches share the stages: they overlap in time, and some wait for a stage.
    busy = r.steps.sort_values("start")
    overlap = (busy["start"].shift(-1) < busy["start"] + busy["duration"]).sum()
    assert overlap > 0, "micro-batches should overlap in the pipeline"


def test_pipeline_needs_no_more_latency_than_one_gpu_pass():
    one = scenario(model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 4}, **LONE)
    pp = scenario(model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 2, "pp": 2}, **LONE)
    a, b = simulate(one).requests.iloc[0], simulate(pp).requests.iloc[0]
    assert b["e2e"] > a["e2e"]  # TP 2 per stage is slower per layer than TP 4, plus a send


# -- memory pressure: swap -------------------------------------------------------------------
PRESSURE = {"hardware__memory_utilization": 0.235,
            "workload__arrival": {"process": "poisson", "rate": 60},
            "workload__output_len": {"dist": "uniform", "min": 200, "max": 600}}


def test_swap_preemption_parks_kv_in_host_memory_and_brings_it_back():
    plans = []
    from sim.pricing import CostModelExecutor

    s = scenario(scheduler__preemption="swap", **PRESSURE)
    inner = CostModelExecutor(make_cost_model(s))

    class Spy:
        cost = None

        def run(self, plan, table):
            plans.append(plan)
            return inner.run(plan, table)

    r = drive(s, lambda _: Spy(), mode="simulate")
    finished_all(r)
    assert r.summary["preemptions"] > 0
    out = sum(p.swap_out_blocks for p in plans)
    back = sum(p.swap_in_blocks for p in plans)
    assert out == back > 0  # every block parked came back
    # Swapped requests are not recomputed: no plan restarts a request from zero context twice.
    starts = pd.Series([rid for p in plans for rid, c in zip(p.req_ids, p.num_computed, strict=True)
                        if c == 0])
    assert starts.value_counts().max() == 1


def test_swap_cost_is_bytes_over_the_host_link():
    s = scenario()
    cost = make_cost_model(s)
    base = StepShape(8, 8, 0, 0, 8, 8000, 8)
    swap = StepShape(8, 8, 0, 0, 8, 8000, 8, swap_tokens=1600)
    extra = cost.step_time(swap) - cost.step_time(base)
    nbytes = 1600 * s.model_spec.kv_bytes_per_token()
    assert extra == pytest.approx(nbytes / s.gpu_spec.host_bandwidth)


def test_recompute_and_swap_both_finish_everything():
    rec = simulate(scenario(scheduler__preemption="recompute", **PRESSURE))
    swp = simulate(scenario(scheduler__preemption="swap", **PRESSURE))
    finished_all(rec)
    finished_all(swp)


# -- quantization ----------------------------------------------------------------------------
def test_fp8_weights_halve_weight_memory_and_speed_up_decode():
    bf16 = scenario()
    fp8 = scenario(quantization={"weights": "fp8"})
    embed = bf16.model_spec.embedding_params * 2  # embeddings and LM head stay in the checkpoint's bf16
    assert fp8.memory.weight_bytes == pytest.approx((bf16.memory.weight_bytes - embed) / 2 + embed)
    assert fp8.memory.num_blocks > bf16.memory.num_blocks
    d = StepShape(8, 8, 0, 0, 8, 8000, 8)
    assert make_cost_model(fp8).step_time(d) < make_cost_model(bf16).step_time(d)


def test_int4_weights_and_fp8_kv():
    s = scenario(quantization={"weights": "int4", "kv_cache": "fp8"})
    base = scenario()
    embed = base.model_spec.embedding_params * 2  # embeddings and LM head stay in bf16
    assert s.memory.weight_bytes == pytest.approx((base.memory.weight_bytes - embed) / 4 + embed)
    assert s.memory.kv_bytes_per_token == pytest.approx(base.memory.kv_bytes_per_token / 2)
    # int4 is weight-only: long prefills run on the bf16 tensor cores
    p = StepShape(8192, 1, 8192, 8192**2, 0, 0, 1)
    w4 = make_cost_model(s).op_times(p)["mlp"]
    w16 = make_cost_model(base).op_times(p)["mlp"]
    # int4 weights run on the W4A16 kernels' curve (dequantized in the GEMM): at 8192 rows its plateau,
    # against bf16's (the ridge loss left differs by their bytes)
    curves = [efficiency.gemm_curve(get_gpu("H100-SXM"), d).peak_fraction for d in ("bf16", "int4")]
    assert w4 == pytest.approx(w16 * curves[0] / curves[1], rel=0.05)


# -- speculative decoding --------------------------------------------------------------------
@pytest.mark.parametrize("alpha,k", [(0.6, 3), (0.9, 5)])
def test_speculative_decoding_advances_by_the_expected_accepted_count(alpha, k):
    spec = {"draft_model": "tiny-llama-12m", "num_tokens": k, "acceptance_rate": alpha}
    s = scenario(scheduler__speculative=spec, workload__num_requests=60,
                 workload__output_len={"dist": "fixed", "value": 400})
    r = simulate(s)
    finished_all(r)
    decode_rows = r.steps["decode_seqs"].sum()
    tokens_from_decodes = r.requests["output_tokens"].sum() - len(r.requests)
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert tokens_from_decodes / decode_rows == pytest.approx(expected, rel=0.05)


def test_speculative_step_pays_for_draft_and_verification():
    s = scenario(scheduler__speculative={"draft_model": "tiny-llama-12m", "num_tokens": 4})
    cost = make_cost_model(s)
    plain = StepShape(8, 8, 0, 0, 8, 8000, 8)
    spec = StepShape(8 + 32, 8, 0, 0, 8, 8000, 8, verify_tokens=32)
    ops = cost.op_times(spec)
    assert ops["draft"] > 0
    assert cost.step_time(spec) > cost.step_time(plain)


# -- mixture of experts ----------------------------------------------------------------------
def test_mixtral_memory_and_expert_costs():
    m = get_model("mixtral-8x7b")
    assert 45e9 < m.num_params < 48e9
    s = scenario(model="mixtral-8x7b", hardware={"gpu": "H100-SXM", "tp": 2})
    cost = make_cost_model(s)
    few = cost.op_times(StepShape(1, 1, 0, 0, 1, 100, 1))["moe_mlp"]
    many = cost.op_times(StepShape(64, 64, 0, 0, 64, 6400, 64))["moe_mlp"]
    assert many > 3 * few  # one token reads 2 experts' weights; 64 tokens touch all 8
    ep = scenario(model="mixtral-8x7b", hardware={"gpu": "H100-SXM", "tp": 2, "expert_parallel": True})
    assert "all_to_all" in make_cost_model(ep).op_times(StepShape(64, 64, 0, 0, 64, 6400, 64))
    finished_all(simulate(ep))


# -- invariants hold in cluster runs ---------------------------------------------------------
INVARIANT_CASES = {
    "disaggregated-tight": {"disaggregation": {"prefill": {"count": 1}, "decode": {
        "count": 1, "hardware": {"memory_utilization": 0.235}}}, **PRESSURE},
    "pipeline": {"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 2, "pp": 2},
                 "workload__arrival": {"process": "poisson", "rate": 8}},
    "routers-swap": {"replicas": 3, "router": {"policy": "least-kv"}, "scheduler__preemption": "swap",
                     **PRESSURE},
    "chunked-hetero": {"scheduler__policy": "chunked-prefill", "replica_groups": [
        {"count": 2, "hardware": {"gpu": "L40S"}}, {"count": 1, "hardware": {"gpu": "B200"}}]},
}


@pytest.mark.parametrize("case", INVARIANT_CASES, ids=str)
def test_conservation_and_kv_capacity_in_cluster_runs(case):
    s = scenario(**INVARIANT_CASES[case])
    r = simulate(s)
    df = r.requests
    assert set(df["status"]) <= {"finished", "rejected"}
    assert (df.loc[df["status"] == "rejected", "reject_reason"] != "").all()
    fin = df[df["status"] == "finished"]
    assert (fin["output_tokens"] == fin["max_output_tokens"]).all()
    assert (fin["completion"] >= fin["first_token"]).all() and (fin["first_token"] > fin["arrival"]).all()
    capacity = {spec.index: spec.memory.num_blocks for spec in s.replica_specs}
    peak = r.steps.groupby("replica")["kv_blocks_used"].max()
    for replica, used in peak.items():
        assert used <= capacity[replica]


# -- a run on the wall clock -----------------------------------------------------------------
def test_wall_clock_starts_once_the_core_is_compiled(monkeypatch):
    """A real-time run (the engine's) first simulates a few of its requests on the SimPy loop,
    which compiles (or loads) every core entry that loop calls, and only then starts its clock:
    on a cold build the engine's first step once took 16 to 55 s of compiling, counted as
    queueing. A run on virtual time does neither."""
    import simpy

    from sim.loops import run as run_module
    from sim.pricing import CostModelExecutor

    order: list[str] = []
    simulate_ = run_module.simulate

    def spy_simulate(sc, **kw):
        order.append(f"warm {sc.simulation.loop} {sc.workload.num_requests}")
        return simulate_(sc, **kw)

    monkeypatch.setattr(run_module, "simulate", spy_simulate)

    class Env(simpy.RealtimeEnvironment):
        def sync(self):
            order.append("sync")
            super().sync()

    s = scenario(workload__num_requests=3)
    inner = CostModelExecutor(make_cost_model(s))

    class Spy:
        cost = None

        def run(self, plan, table):
            order.append("step")
            return inner.run(plan, table)

    finished_all(drive(s, lambda _: Spy(), env=Env(factor=1e-6, strict=False), mode="simulate"))
    assert order[:3] == ["warm simpy 4", "sync", "step"]
    order.clear()
    finished_all(drive(s, lambda _: Spy(), mode="simulate"))
    assert "sync" not in order and not any(o.startswith("warm") for o in order)
