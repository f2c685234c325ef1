"""Does every shipped scenario and study still make its point?

    python scenarios/check_examples.py                 # every example; exit code 1 if one lost its point
    python scenarios/check_examples.py policy router   # the examples whose name contains a word given
    python scenarios/check_examples.py --list

Each example's header says what the user should see ("What you should see: ..."). This runs the
example and the alternatives its header names, and checks those claims as ranges: a comparison
still separates the policies, a showcase's feature still wins where it should, SLO attainment is
neither ~0% nor trivially 100% where the example is about a knee. Rerun it after a change to the
pricing or scheduling core: a FAIL names the claim and the numbers measured, so the example's
rate or SLO (and the numbers in its header) can be retuned. KNOWN marks a claim that needs a core
change named beside it; it reads FIXED once the core has it (then make it a plain check).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.errors import TraceError  # noqa: E402
from sim.loops.run import simulate  # noqa: E402
from sim.scenario.load import load_scenario  # noqa: E402

SCENARIOS = ROOT / "scenarios"
STUDIES = SCENARIOS / "studies"
AZURE_TRACE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"


class Skip(Exception):
    """The example cannot run here (a trace that is not shipped)."""


@dataclass
class Claim:
    text: str
    ok: bool
    measured: str
    known: str = ""  # a core change this claim waits for


@dataclass
class Example:
    name: str
    claims: list[Claim] = field(default_factory=list)

    def check(self, text: str, ok: bool, measured: str, known: str = "") -> None:
        self.claims.append(Claim(text, bool(ok), measured, known))


@cache
def run(name: str, *sets: str) -> dict:
    """The summary of scenarios/NAME.yaml with ``--set`` overrides (cached)."""
    path = SCENARIOS / f"{name}.yaml"
    if "shared/traces" in path.read_text() and not AZURE_TRACE.is_file():
        raise Skip(f"needs {AZURE_TRACE} (see the header of {path.name})")
    try:
        return simulate(load_scenario(path, list(sets))).summary
    except TraceError as e:
        raise Skip(str(e)) from None


def att(s: dict) -> float:
    return s["slo_attainment"]


def pct(x: float) -> str:
    return f"{x:.1%}"


def ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x < 10 else f"{x:.1f} s"


# -- scenarios -----------------------------------------------------------------------------------

def quickstart(ex: Example) -> None:
    s, lo, hi = run("quickstart"), run("quickstart", "workload.arrival.rate=18"), run(
        "quickstart", "workload.arrival.rate=28")
    ex.check("near the knee at 22 req/s: 85–99.5% meet the SLO", 0.85 <= att(s) <= 0.995, pct(att(s)))
    ex.check("18 req/s leaves headroom (≥ 99.5%)", att(lo) >= 0.995, pct(att(lo)))
    ex.check("28 req/s breaks it (< 70%)", att(hi) < 0.7, pct(att(hi)))


def burst(ex: Example) -> None:
    s, flat = run("burst"), run("burst", "workload.arrival.rate.bursts=[]")
    b = s["bursts"][0]
    ex.check("the burst builds a queue: peak ≥ 5 × the peak without it",
             s["peak_queue"] >= 5 * max(flat["peak_queue"], 1),
             f"{s['peak_queue']} vs {flat['peak_queue']}")
    ex.check("the queue recovers within 30 s of the burst's end",
             b["time_to_recover_s"] is not None and b["time_to_recover_s"] <= 30, str(b["time_to_recover_s"]))
    ex.check("inside the burst < 50% meet the SLO, outside ≥ 95%",
             s["slo_attainment_in_bursts"] < 0.5 <= 0.95 <= s["slo_attainment_outside_bursts"],
             f"{pct(s['slo_attainment_in_bursts'])} inside, {pct(s['slo_attainment_outside_bursts'])} outside")
    ex.check("without the burst every request meets it (≥ 99.5%)", att(flat) >= 0.995, pct(att(flat)))


def policies(ex: Example) -> None:
    c, k, st = run("policy-chunked-prefill"), run("policy-continuous"), run("policy-static")
    got = f"chunked {pct(att(c))}, continuous {pct(att(k))}, static {pct(att(st))}"
    ex.check("chunked prefill meets the SLO for ≥ 90%", att(c) >= 0.9, got)
    ex.check("continuous batching in between (30–90%)", 0.3 <= att(k) <= 0.9, got)
    ex.check("static batching for almost none (< 20%)", att(st) < 0.2, got)
    ex.check("continuous stalls decodes: its TPOT p99 > 1.5 × chunked's", k["tpot_p99"] > 1.5 * c["tpot_p99"],
             f"{ms(k['tpot_p99'])} vs {ms(c['tpot_p99'])}")
    from sim.study.compare import load_entries, pick_winner, run_entries
    from sim.study.runners import SerialRunner

    entries = load_entries([str(SCENARIOS / f"policy-{p}.yaml") for p in ("chunked-prefill", "continuous", "static")],
                           {}, same_traffic=True)
    run_entries(entries, SerialRunner())
    ex.check("compare marks chunked prefill ★ the winner", pick_winner(entries).name == "policy-chunked-prefill",
             pick_winner(entries).note)


def azure_conversation(ex: Example) -> None:
    one, two = run("azure-conversation"), run("azure-conversation", "replicas=2")
    ex.check("one TP-4 replica: the busy minutes break it (50–95%)", 0.5 <= att(one) <= 0.95, pct(att(one)))
    ex.check("TTFT p99 reaches seconds", one["ttft_p99"] > 1.5, ms(one["ttft_p99"]))
    ex.check("two replicas hold it (≥ 99%)", att(two) >= 0.99, pct(att(two)))


def disaggregated(ex: Example) -> None:
    d, c = run("disaggregated"), run("disaggregated", "disaggregation=null", "replicas=2")
    ex.check("disaggregated meets the 16 ms TPOT SLO for 85–99.5%", 0.85 <= att(d) <= 0.995, pct(att(d)))
    ex.check("colocated on the same 2 GPUs: ≥ 30 points fewer", att(c) <= att(d) - 0.3, pct(att(c)))
    ex.check("colocated has the lower TTFT p50", c["ttft_p50"] < d["ttft_p50"],
             f"{ms(c['ttft_p50'])} vs {ms(d['ttft_p50'])}")


def heterogeneous(ex: Example) -> None:
    lo, rr = run("heterogeneous"), run("heterogeneous", "router.policy=round-robin")
    ex.check("least-outstanding meets the SLO for ≥ 90%", att(lo) >= 0.9, pct(att(lo)))
    ex.check("round-robin overloads the A100 pair: ≥ 15 points fewer", att(rr) <= att(lo) - 0.15, pct(att(rr)))


def mixtral(ex: Example) -> None:
    s, light = run("mixtral-expert-parallel"), run("mixtral-expert-parallel", "workload.arrival.rate=10")
    tp = run("mixtral-expert-parallel", "hardware.expert_parallel=false")
    ex.check("at the knee at 13 req/s (50–97%)", 0.5 <= att(s) <= 0.97, pct(att(s)))
    ex.check("10 req/s: all meet it (≥ 99%)", att(light) >= 0.99, pct(att(light)))
    ex.check("TP prices within 10% of EP (TPOT p50)", abs(tp["tpot_p50"] / s["tpot_p50"] - 1) < 0.1,
             f"{ms(tp['tpot_p50'])} vs {ms(s['tpot_p50'])}")


def mooncake(ex: Example) -> None:
    s, off = run("mooncake-trace"), run("mooncake-trace", "scheduler.prefix_caching=false")
    ex.check("most prompt tokens from the cache (≥ 50%)", s["prefix_hit_rate"] >= 0.5, pct(s["prefix_hit_rate"]))
    ex.check("caching: ≥ 98% meet the SLO", att(s) >= 0.98, pct(att(s)))
    ex.check("no caching: overloaded, TTFT p50 ≥ 100× and ≤ 10% meet it",
             off["ttft_p50"] >= 100 * s["ttft_p50"] and att(off) <= 0.1,
             f"{ms(off['ttft_p50'])} vs {ms(s['ttft_p50'])}, {pct(att(off))}")


def multi_class(ex: Example) -> None:
    s, same = run("multi-class"), run("multi-class", "workload.classes.1.priority=0")
    chat, batch, chat0 = s["classes"]["chat"], s["classes"]["batch"], same["classes"]["chat"]
    ex.check("chat served first meets its SLO (≥ 95%)", att(chat) >= 0.95, pct(att(chat)))
    ex.check("batch waits but meets its deadline (≥ 90%)", att(batch) >= 0.9, pct(att(batch)))
    ex.check("batch TTFT p99 ≥ 3 × chat's (it waits)", batch["ttft_p99"] >= 3 * chat["ttft_p99"],
             f"{ms(batch['ttft_p99'])} vs {ms(chat['ttft_p99'])}")
    ex.check("same priority: chat TTFT p99 ≥ 3× and ≥ 10 points fewer meet it",
             chat0["ttft_p99"] >= 3 * chat["ttft_p99"] and att(chat0) <= att(chat) - 0.1,
             f"{ms(chat0['ttft_p99'])}, {pct(att(chat0))}")


def multi_turn(ex: Example) -> None:
    s, off = run("multi-turn"), run("multi-turn", "scheduler.prefix_caching=false")
    ex.check("most prompt tokens from the cache (≥ 50%)", s["prefix_hit_rate"] >= 0.5, pct(s["prefix_hit_rate"]))
    ex.check("caching: ≥ 98% meet the SLO", att(s) >= 0.98, pct(att(s)))
    ex.check("no caching: ≥ 20 points fewer", att(off) <= att(s) - 0.2, pct(att(off)))


def kv_tiers(ex: Example) -> None:
    s = run("kv-tiers")
    cpu = run("kv-tiers", "kv_tiers.tiers=[{medium: cpu, capacity_gb: 64}]")
    off = run("kv-tiers", "kv_tiers=null")
    tiers = s["kv_tiers"]["tiers"]
    ex.check("CPU + shared: ≥ 80% of prompt tokens from a cache, each tier serving ≥ 10%",
             s["prefix_hit_rate"] >= 0.8 and min(t["hit_rate"] for t in tiers.values()) >= 0.1,
             f"{pct(s['prefix_hit_rate'])}: " + ", ".join(f"{k} {pct(t['hit_rate'])}" for k, t in tiers.items()))
    ex.check("CPU alone: ≥ 15 points above no tiers, ≥ 5 below CPU + shared",
             off["prefix_hit_rate"] + 0.15 <= cpu["prefix_hit_rate"] <= s["prefix_hit_rate"] - 0.05,
             f"{pct(off['prefix_hit_rate'])} < {pct(cpu['prefix_hit_rate'])} < {pct(s['prefix_hit_rate'])}")
    ex.check("TTFT p90 falls tier by tier (no tiers ≥ 3× CPU alone ≥ 2× CPU + shared)",
             off["ttft_p90"] >= 3 * cpu["ttft_p90"] and cpu["ttft_p90"] >= 2 * s["ttft_p90"],
             f"{ms(off['ttft_p90'])}, {ms(cpu['ttft_p90'])}, {ms(s['ttft_p90'])}")
    ex.check("SLO attainment: CPU + shared ≥ 70%, ≥ 30 points above no tiers",
             att(s) >= 0.7 and att(s) >= att(off) + 0.3, f"{pct(att(s))} vs {pct(att(off))}")


def wide_ep(ex: Example) -> None:
    name, d = "deepseek-v3-wide-ep", "disaggregation.decode."
    s = run(name)
    no_tbo = run(name, d + "hardware.two_batch_overlap=false")
    tp16 = run(name, d + "count=4", d + "hardware={gpu: H100-SXM, tp: 16, expert_parallel: true}")
    ex.check("wide EP at 20 req/s: ≥ 99% within the SLO, TPOT p50 10-20 ms",
             att(s) >= 0.99 and 0.010 <= s["tpot_p50"] <= 0.020, f"{pct(att(s))}, TPOT p50 {ms(s['tpot_p50'])}")
    ex.check("two-batch overlap off: TPOT ≥ 1.4×", no_tbo["tpot_p50"] >= 1.4 * s["tpot_p50"],
             f"{ms(no_tbo['tpot_p50'])} vs {ms(s['tpot_p50'])}")
    ex.check("4 × TP 16 on 64 GPUs: TPOT ≥ 3×", tp16["tpot_p50"] >= 3 * s["tpot_p50"],
             f"{ms(tp16['tpot_p50'])} vs {ms(s['tpot_p50'])}")


def pipeline(ex: Example) -> None:
    pp, tp = run("pipeline-parallel-70b"), run("pipeline-parallel-70b", "hardware.pp=1", "hardware.tp=4")
    ex.check("PP 2 × TP 2 at 1.8 req/s: 40–95% meet the SLO", 0.4 <= att(pp) <= 0.95, pct(att(pp)))
    ex.check("TP 4 on the same GPUs: ≥ 15 points more, lower TPOT",
             att(tp) >= att(pp) + 0.15 and tp["tpot_p50"] < pp["tpot_p50"],
             f"{pct(att(tp))}, TPOT p50 {ms(tp['tpot_p50'])} vs {ms(pp['tpot_p50'])}")


def fp8(ex: Example) -> None:
    s, bf = run("quantization-fp8"), run("quantization-fp8", "quantization.weights=bf16",
                                          "quantization.kv_cache=bf16")
    ex.check("FP8 meets the SLO (≥ 95%)", att(s) >= 0.95, pct(att(s)))
    ex.check("BF16 past its knee (< 50%)", att(bf) < 0.5, pct(att(bf)))


def router(ex: Example) -> None:
    lkv = run("router-least-kv")
    others = {p: run("router-least-kv", f"router.policy={p}")
              for p in ("least-outstanding", "power-of-two", "round-robin")}
    got = f"least-kv {pct(att(lkv))}, " + ", ".join(f"{p} {pct(att(s))}" for p, s in others.items())
    ex.check("under KV pressure least-kv meets the SLO for 60–97%", 0.6 <= att(lkv) <= 0.97, got)
    ex.check("least-kv beats every other router", all(att(lkv) > att(s) for s in others.values()), got)
    # Bursty traffic with KV to spare: on the exact state least-kv counts the blocks queued prompts
    # will take, so a burst does not herd onto the replica whose queue no step has admitted yet;
    # on the engines' metrics sampled every 50 ms (the default) it does, between samples, unless
    # it adds what it routed since the sample (router.add_routed).
    burst = ("workload.arrival.cv=3", "hardware.memory_utilization=0.9", "workload.arrival.rate=40",
             "workload.output_len.mean=250", "workload.output_len.sigma=0.8", "workload.output_len.max=1024",
             "workload.prompt_len.sigma=1.0")
    b, rr = run("router-least-kv", *burst, "router.refresh_s=0"), run("router-least-kv", *burst,
                                                                        "router.policy=round-robin")
    ex.check("bursts with KV to spare: exact least-kv's TTFT p99 ≤ 1.2 × round-robin's",
             b["ttft_p99"] <= 1.2 * rr["ttft_p99"], f"{ms(b['ttft_p99'])} vs {ms(rr['ttft_p99'])}")
    stale, own = run("router-least-kv", *burst), run("router-least-kv", *burst, "router.add_routed=true")
    ex.check("sampled every 50 ms, bursts herd: TTFT p99 above exact least-kv's; adding its own routing "
             "brings it within 1.2 × round-robin's",
             stale["ttft_p99"] > b["ttft_p99"] and own["ttft_p99"] <= 1.2 * rr["ttft_p99"],
             f"{ms(stale['ttft_p99'])}, exact {ms(b['ttft_p99'])}, add_routed {ms(own['ttft_p99'])}, "
             f"round-robin {ms(rr['ttft_p99'])}")


def shared_prompts(ex: Example) -> None:
    s, off = run("shared-prompts"), run("shared-prompts", "scheduler.prefix_caching=false")
    ex.check("most prompt tokens from the cache (≥ 60%)", s["prefix_hit_rate"] >= 0.6, pct(s["prefix_hit_rate"]))
    ex.check("caching: ≥ 98% meet the SLO", att(s) >= 0.98, pct(att(s)))
    ex.check("no caching: saturated (< 50%)", att(off) < 0.5, pct(att(off)))


def speculative(ex: Example) -> None:
    s, off = run("speculative-decoding"), run("speculative-decoding", "scheduler.speculative=null")
    ex.check("speculation meets the 10 ms TPOT SLO (≥ 95%)", att(s) >= 0.95, pct(att(s)))
    ex.check("without: TPOT p50 ≥ 2× and ≥ 30 points fewer",
             off["tpot_p50"] >= 2 * s["tpot_p50"] and att(off) <= att(s) - 0.3,
             f"{ms(off['tpot_p50'])} vs {ms(s['tpot_p50'])}, {pct(att(off))}")


def swap(ex: Example) -> None:
    s, rc = run("swap-preemption"), run("swap-preemption", "scheduler.preemption=recompute")
    ex.check("memory pressure: ≥ 100 preemptions", s["preemptions"] >= 100, str(s["preemptions"]))
    ex.check("swap: 40–95% meet the SLO", 0.4 <= att(s) <= 0.95, pct(att(s)))
    ex.check("recompute: ≥ 3 points fewer and a higher TTFT p50",
             att(rc) <= att(s) - 0.03 and rc["ttft_p50"] > s["ttft_p50"],
             f"{pct(att(rc))}, TTFT p50 {ms(rc['ttft_p50'])} vs {ms(s['ttft_p50'])}")


def tensor_parallel(ex: Example) -> None:
    s, tp8 = run("tensor-parallel-70b"), run("tensor-parallel-70b", "hardware.tp=8")
    ex.check("TP 4 near its knee at 4.5 req/s (80–99%)", 0.8 <= att(s) <= 0.99, pct(att(s)))
    ex.check("TP 8: TPOT p50 < 0.8 × TP 4's, every request within the SLO",
             tp8["tpot_p50"] < 0.8 * s["tpot_p50"] and att(tp8) >= 0.99,
             f"{ms(tp8['tpot_p50'])} vs {ms(s['tpot_p50'])}, {pct(att(tp8))}")


def vidur(ex: Example) -> None:
    s, rl = run("vidur-a100-llama2-70b"), run("vidur-a100-llama2-70b", "cost.model=roofline")
    ex.check("measured profile: 40–90% meet the SLO", 0.4 <= att(s) <= 0.9, pct(att(s)))
    # The fitted roofline (docs/roofline.md) now agrees with the steps Vidur measured on A100s.
    ex.check("the fitted roofline agrees with the measured steps (TPOT p50 within 10%)",
             abs(rl["tpot_p50"] / s["tpot_p50"] - 1) < 0.1, f"{ms(rl['tpot_p50'])} vs {ms(s['tpot_p50'])}")
    ex.check("the roofline: SLO attainment within 5 points of the profile's", abs(att(rl) - att(s)) <= 0.05,
             f"{pct(att(rl))} vs {pct(att(s))}")


# -- studies -------------------------------------------------------------------------------------

def autoscale(ex: Example) -> None:
    a = run("autoscale-diurnal")
    fleet = a["autoscale"]
    fixed = run("autoscale-diurnal", "autoscale=null", f"replicas={fleet['max_held']}")
    ex.check("the fleet follows the curve: 1 replica at night, about 6 at the peak",
             fleet["min_active"] == 1 and 5 <= fleet["max_held"] <= 7, f"{fleet['min_active']} to {fleet['max_held']}")
    share = fleet["gpu_hours"] / fixed["gpu_hours"]
    ex.check("about 7 GPU-hours, about 58% of a fixed fleet of the peak's", 6 <= fleet["gpu_hours"] <= 8
             and 0.45 <= share <= 0.7, f"{fleet['gpu_hours']:.2f} GPU-hours, {pct(share)} of {fixed['gpu_hours']:.2f}")
    ex.check("about 99% meet the SLO (the fixed fleet about 100%)", att(a) >= 0.97 and att(fixed) >= 0.995,
             f"{pct(att(a))} vs {pct(att(fixed))}")
    worst = fleet["worst_stretch"]["slo_attainment"]
    ex.check("the worst stretch between changes about 89%", 0.75 <= worst < att(a), pct(worst))


def study(name: str, *sets: str):
    """The outcome of scenarios/studies/NAME.yaml, run in this process."""
    from sim.cli.app import _extra_commands  # noqa: F401  (the study package registers itself)
    from sim.study.cli import _parse_sets
    from sim.study.driver import execute_plan
    from sim.study.plan import plan_study
    from sim.study.runners import SerialRunner
    from sim.study.schema import load_study
    from sim.study.store import RunStore

    path = STUDIES / f"{name}.yaml"
    text = path.read_text() + (STUDIES / "bases" / "azure-conv.yaml").read_text() * ("azure" in name)
    if "shared/traces" in text and not AZURE_TRACE.is_file():
        raise Skip(f"needs {AZURE_TRACE} (see the header of {path.name})")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_study(load_study(path), str(path), _parse_sets(list(sets)))
        return execute_plan(plan, RunStore(Path(tmp)), SerialRunner()).outcome


def policies_study(ex: Example) -> None:
    out = study("policies-across-load")
    cfg = out.configs.set_index("scheduler.policy")
    ex.check("chunked prefill is the answer", out.best["scheduler.policy"] == "chunked-prefill",
             str(out.best["scheduler.policy"]))
    ex.check("it holds the SLO to a higher rate than continuous batching",
             cfg.loc["chunked-prefill", "max_rate_meeting_slo"] > cfg.loc["continuous", "max_rate_meeting_slo"],
             f"{cfg.loc['chunked-prefill', 'max_rate_meeting_slo']} vs {cfg.loc['continuous', 'max_rate_meeting_slo']}")
    ex.check("static batching holds it at no rate tried", cfg["max_rate_meeting_slo"].isna()["static"],
             str(cfg.loc["static", "max_rate_meeting_slo"]))


def chunk_study(ex: Example) -> None:
    out = study("chunk-size-sweep")
    rates = out.configs["max_rate"].dropna()
    ex.check("the best chunk is a large one (2048 or 4096, near-tied)",
             out.best["scheduler.chunk_size"] in (2048, 4096), str(out.best["scheduler.chunk_size"]))
    ex.check("the settings matter: best ≥ 1.5 × worst", rates.max() >= 1.5 * rates.min(),
             f"{rates.max():.3g} vs {rates.min():.3g} req/s")


def tp_study(ex: Example) -> None:
    out = study("tp-70b")
    cfg = out.configs
    h100 = cfg[cfg["hardware.gpu"] == "H100-SXM"].set_index("hardware.tp")
    ex.check("an answer is found", out.best is not None and out.best.get("outcome") == "found",
             str(out.best and out.best.get("config")))
    # With GPU memory in GiB (docs/roofline.md) TP 2 now fits an 80 GB H100, with little KV room.
    ex.check("TP 2 on 80 GB H100s (little KV room) serves the least: < 0.6 × TP 4's rate",
             h100.loc[2, "max_rate"] < 0.6 * h100.loc[4, "max_rate"]
             and h100.loc[2, "max_rate"] == cfg["max_rate"].min(),
             f"{h100.loc[2, 'max_rate']:.3g} vs {h100.loc[4, 'max_rate']:.3g} req/s")


def disagg_study(ex: Example) -> None:
    tight, loose = study("colocated-vs-disaggregated"), study("colocated-vs-disaggregated", "slo.tpot_s=0.04")
    col = tight.configs.set_index("case").loc["colocated 8", "max_rate"]
    best = tight.best
    ex.check("TPOT ≤ 15 ms: a P:D split wins by ≥ 15%",
             best["case"] != "colocated 8" and best["max_rate"] >= 1.15 * col,
             f"{best['case']} {best['max_rate']:.3g} vs {col:.3g}")
    ex.check("TPOT ≤ 40 ms: colocated wins", loose.best["case"] == "colocated 8", str(loose.best["case"]))


def azure_study(ex: Example) -> None:
    out = study("azure-replicas")
    cfg = out.configs
    ex.check("an answer is found: 2 replicas", out.best is not None and out.best["replicas"] == 2,
             str(out.best and out.best.get("config")))
    ex.check("one replica misses the p99 TTFT limit", not cfg[cfg["replicas"] == 1]["meets_slo"].any(),
             ", ".join(cfg[cfg["replicas"] == 1]["config"]))


EXAMPLES: dict[str, Callable[[Example], None]] = {
    "quickstart": quickstart, "burst": burst, "policy-*": policies, "azure-conversation": azure_conversation,
    "autoscale-diurnal": autoscale,
    "disaggregated": disaggregated, "heterogeneous": heterogeneous, "mixtral-expert-parallel": mixtral,
    "mooncake-trace": mooncake, "multi-class": multi_class, "multi-turn": multi_turn, "kv-tiers": kv_tiers,
    "deepseek-v3-wide-ep": wide_ep,
    "pipeline-parallel-70b": pipeline, "quantization-fp8": fp8, "router-least-kv": router,
    "shared-prompts": shared_prompts, "speculative-decoding": speculative, "swap-preemption": swap,
    "tensor-parallel-70b": tensor_parallel, "vidur-a100-llama2-70b": vidur,
    "study policies-across-load": policies_study, "study chunk-size-sweep": chunk_study,
    "study tp-70b": tp_study, "study colocated-vs-disaggregated": disagg_study,
    "study azure-replicas": azure_study,
}


def covered() -> set[str]:
    """The shipped files these checks cover (a new file without a check is an error)."""
    out = set()
    for name in EXAMPLES:
        if name.startswith("study "):
            out.add(f"studies/{name[6:]}.yaml")
        elif name.endswith("*"):
            out |= {p.name for p in SCENARIOS.glob(name[:-1] + "*.yaml")}
        else:
            out.add(f"{name}.yaml")
    return out


def shipped() -> set[str]:
    return {p.name for p in SCENARIOS.glob("*.yaml")} | {f"studies/{p.name}" for p in STUDIES.glob("*.yaml")}


def check(name: str) -> tuple[Example, str | None]:
    ex = Example(name)
    try:
        EXAMPLES[name](ex)
    except Skip as e:
        return ex, str(e)
    return ex, None


def status(c: Claim) -> str:
    if c.known:
        return "FIXED" if c.ok else "KNOWN"
    return "PASS" if c.ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("words", nargs="*", help="check only the examples whose name contains one of these")
    p.add_argument("--list", action="store_true", help="list the examples and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(EXAMPLES))
        return 0
    missing = sorted(shipped() - covered())
    failed = 0
    if missing:
        print(f"FAIL  no check for {', '.join(missing)}: add one to scenarios/check_examples.py")
        failed += 1
    for name in EXAMPLES:
        if args.words and not any(w in name for w in args.words):
            continue
        t0 = time.perf_counter()
        ex, skipped = check(name)
        took = time.perf_counter() - t0
        if skipped:
            print(f"SKIP  {name}: {skipped}")
            continue
        print(f"{name} ({took:.1f} s)")
        for c in ex.claims:
            print(f"  {status(c):5s} {c.text}: {c.measured}" + (f"  [needs: {c.known}]" if c.known else ""))
            failed += status(c) == "FAIL"
    print(f"{failed} claim(s) failed" if failed else "every example makes its point")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
