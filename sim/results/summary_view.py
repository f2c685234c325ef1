"""A run's summary as tables of text, the same in the terminal and in report.html: what was
simulated, the SLO, latencies in ms (mean, p50, p90, p99), throughput with the drain
explained, goodput and SLO attainment, per class when there are classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.results import fmt
from sim.results.band_view import band_table
from sim.results.describe import class_slo, has_slo, setup_rows, slo_text
from sim.results.money import cost_text, price_text

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"),
             ("queueing_delay", "queueing delay"))
STATS = ("mean", "p50", "p90", "p99")
# vllm bench serve's definitions, shown under the latency table
DEFINITIONS = ("TTFT: first token − arrival. TPOT: (E2E − TTFT) / (output tokens − 1), per request. "
               "ITL: every gap between consecutive output tokens, over all requests. "
               "E2E: last token − arrival. Queueing delay: first scheduled − arrival.")


@dataclass
class Block:
    """A titled table: ``headers`` (empty: key/value rows) and rows of text."""

    title: str
    rows: list[list[str]]
    headers: list[str] = field(default_factory=list)
    note: str = ""


def latency_block(summary: dict, title: str = "Latency (ms)", note: str = DEFINITIONS) -> Block:
    rows = []
    for key, name in LATENCIES:
        if f"{key}_p50" not in summary:
            continue
        rows.append([name, *(fmt.ms(summary.get(f"{key}_{st}")) for st in STATS)])
    return Block(title, rows, ["", *STATS], note)


def results_block(summary: dict, num_gpus: int, prefix_caching: bool, slo: str, price: str = "") -> Block:
    """SLO attainment, goodput, throughput (with the drain explained), cost, requests and engine;
    ``price``: the fleet's price (``money.price_text``; where it comes from is a setup row)."""
    s = summary
    n = s["requests"]
    met = round(s["slo_attainment"] * n) if n else 0
    rows = [["SLO", slo],
            ["SLO attainment", f"{fmt.pct(s['slo_attainment'])} ({met:,} of {fmt.plural(n, 'request')})"]]
    if s.get("classes"):
        rows[-1][1] += "; " + ", ".join(f"{name} {fmt.pct(c['slo_attainment'])}" for name, c in s["classes"].items())
    rows.append(["goodput", fmt.rate(s["goodput"])
                 + (f" ({fmt.rate(s['goodput_per_gpu'])} per GPU)" if num_gpus > 1 else "")])
    rows.append(["throughput", f"{fmt.rate(s['request_throughput'])}, "
                 f"{fmt.rate(s['output_token_throughput'], 'output tok/s')}, "
                 f"{fmt.rate(s['total_token_throughput'], 'tok/s')} with prompts"])
    if not fmt.missing(s.get("cost_per_hour")):
        rows.append(["cost", cost_text(s, price)])
    if "energy_kwh" in s:
        from sim.results.energy import energy_text  # here: sim.pricing loads the compiled core (test_build.py)

        rows.append(["energy", energy_text(s)])
    span, duration = s.get("arrival_span_s"), s.get("duration_s")
    if not fmt.missing(span) and not fmt.missing(duration):
        drain = max(duration - span, 0.0)
        rows.append(["measured over", f"{fmt.duration(duration)}: {fmt.duration(span)} of arrivals "
                     f"+ {fmt.duration(drain)} to drain (offered {fmt.rate(s.get('offered_rate'))})"])
    rows.append(["requests", f"{s['finished']:,} finished, {s['rejected']:,} rejected"
                 + (f", {s['unfinished']:,} unfinished" if s.get("unfinished") else "")
                 + f", {fmt.plural(s['preemptions'], 'preemption')}"])
    rows += traffic_rows(s)
    engine = []
    if "mean_batch_size" in s:
        engine.append(f"mean batch {fmt.num(s['mean_batch_size'])} sequences (time-weighted)")
    if not fmt.missing(s.get("mean_decode_batch")):
        engine.append(f"{fmt.num(s['mean_decode_batch'])} per decode step")
    if "mean_kv_utilization" in s:
        engine.append(f"KV cache {fmt.pct(s['mean_kv_utilization'])} in use (time-weighted)")
    if prefix_caching or s.get("prefix_hit_rate"):
        engine.append(f"prefix cache hits {fmt.pct(s.get('prefix_hit_rate'))} of prompt tokens")
    if engine:
        rows.append(["engine", ", ".join(engine)])
    if s.get("kv_tiers"):
        rows.append(["KV tiers", tiers_text(s["kv_tiers"])])
    rows.append(["mean lengths", f"{fmt.num(s.get('mean_prompt_tokens'))} prompt, "
                 f"{fmt.num(s.get('mean_output_tokens'))} output tokens"])
    note = ("Goodput: requests per second that finished within every SLO limit, over the arrival "
            "window (SLO attainment × offered rate). Cost per token: the fleet's $/h over that same "
            "window, divided by the tokens of the finished requests (the drain is not billed). "
            "Throughput is over the span from the first "
            "arrival to the last completion, so it reads below the offered rate by the drain even "
            "when every request is served. The mean batch per decode step leaves out prefill-only "
            "steps, which the time-weighted mean counts. Queue: requests arrived and not yet "
            "scheduled; a burst's time to recover runs from its end to the first instant the queue "
            "is back at its mean over the burst's own length before it (README, \"Reading the results\").")
    return Block("Results", rows, [], note)


def tiers_text(t: dict) -> str:
    """Where the prompt tokens came from, level by level, and what moved (sim/results/tiers.py)."""
    parts = [f"GPU {fmt.pct(t['gpu_hit_rate'])}"]
    for name, x in t["tiers"].items():
        part = (f"{name} {fmt.pct(x['hit_rate'])} ({fmt.plural(x['loads'], 'load')}, "
                f"{x['loaded_bytes'] / 1e9:.3g} GB in, {x['stored_bytes'] / 1e9:.3g} GB stored)")
        if x["recomputed_tokens"]:
            part += f", {x['recomputed_tokens']:,} tokens found but recomputed"
        parts.append(part)
    return (f"prompt tokens from {', '.join(parts)}; written {t['write']}, loaded {t['load']}"
            + (f", at least {t['min_load_tokens']:,} tokens" if t["min_load_tokens"] else ""))


def ended_text(e: dict) -> str:
    """What ended the arrivals, in words."""
    last = fmt.duration(e.get("last_arrival_s"))
    n = e.get("num_requests")
    d = e.get("duration_s")
    if e["by"] == "num_requests":
        return f"num_requests ({n:,}) reached at {last}" + (
            f", before duration_s ({fmt.num(d)} s)" if d is not None else "")
    if e["by"] == "duration_s":
        return f"duration_s ({fmt.num(d)} s); last arrival at {last}" + (
            f", before num_requests ({n:,})" if n is not None else "")
    return f"the traffic itself (trace or schedule ran out) at {last}"


def traffic_rows(s: dict) -> list[list[str]]:
    """What ended the arrivals, the peak queue and each burst's effect."""
    rows = []
    if s.get("arrivals_ended_by"):
        rows.append(["arrivals ended by", ended_text(s["arrivals_ended_by"])])
    if "peak_queue" in s:
        at = f" at {fmt.duration(s['peak_queue_at_s'])}" if "peak_queue_at_s" in s else ""
        rows.append(["peak queue", f"{fmt.plural(s['peak_queue'], 'request')} waiting{at}"])
    for b in s.get("bursts") or []:
        back = ("not back by the end of the run" if b["time_to_recover_s"] is None
                else f"recovered {fmt.duration(b['time_to_recover_s'])} after it ended")
        rows.append([f"burst ×{fmt.num(b['factor'])} at {fmt.num(b['start_s'])}–{fmt.num(b['end_s'])} s",
                     f"peak queue {b['peak_queue']:,}, {back} (queue back to ≤ {fmt.num(b['queue_before'])}, "
                     f"its level before); SLO met by {fmt.pct(b['slo_attainment'])} of its "
                     f"{fmt.plural(b['requests'], 'request')}"])
    if s.get("bursts"):
        rows.append(["SLO in / outside bursts", f"{fmt.pct(s.get('slo_attainment_in_bursts'))} inside, "
                     f"{fmt.pct(s.get('slo_attainment_outside_bursts'))} outside (by arrival time)"])
    return rows


def class_latency_block(summary: dict) -> Block:
    """Latencies per class (never mixed: each class has its own SLO)."""
    rows = []
    for name, c in summary["classes"].items():
        first = True
        for key, label in LATENCIES:
            if f"{key}_p50" not in c:
                continue
            rows.append([name if first else "", label, *(fmt.ms(c.get(f"{key}_{st}")) for st in STATS)])
            first = False
    return Block("Latency per class (ms)", rows, ["class", "", *STATS], DEFINITIONS)


def class_block(summary: dict, scenario) -> Block:
    rows = [[name, slo_text(class_slo(scenario, name)), f"{c['requests']:,}", fmt.pct(c["slo_attainment"]),
             fmt.rate(c["goodput"])] for name, c in summary["classes"].items()]
    return Block("SLO per class", rows, ["class", "SLO", "requests", "SLO met", "goodput"])


MAX_STRETCHES = 12  # stretches between scale changes listed; beyond, the worst (in time order)


def autoscale_blocks(summary: dict) -> list[Block]:
    """An autoscaled fleet: GPU-hours held against a fixed fleet of its peak, its range and
    changes; the SLO attainment between its changes (sim/results/fleet.py)."""
    a = summary["autoscale"]
    rows = [["GPU-hours held", f"{fmt.num(a['gpu_hours'])} (a fixed fleet of its peak, {a['max_held']} "
             f"replicas: {fmt.num(a['fixed_gpu_hours'])})"],
            ["active replicas", f"{a['min_active']} to {a['max_active']}, {fmt.num(a['mean_active'])} on average"],
            ["scale changes", f"{a['scale_changes']:,}"]]
    w = a["worst_stretch"]
    if w is not None:
        rows.append(["worst stretch", f"{fmt.pct(w['slo_attainment'])} SLO met, {fmt.num(w['start_s'])}–"
                     f"{fmt.num(w['end_s'])} s with {w['active']} active ({fmt.plural(w['requests'], 'request')})"])
    note = ("Held: provisioning, active and draining time over the cost window (not replicas × window); the "
            "cost above is its price.")
    stretches = [x for x in a["stretches"] if x["requests"]]
    shown = stretches
    if len(stretches) > MAX_STRETCHES:
        worst = sorted(range(len(stretches)), key=lambda i: stretches[i]["slo_attainment"])[:MAX_STRETCHES]
        shown = [stretches[i] for i in sorted(worst)]
    grid = [[f"{fmt.num(x['start_s'])}–{fmt.num(x['end_s'])}", str(x["active"]), f"{x['requests']:,}",
             fmt.pct(x["slo_attainment"])] for x in shown]
    title = "SLO between scale changes" + (f" (the {len(shown)} worst of {len(stretches)})"
                                           if len(shown) < len(stretches) else "")
    return [Block("Autoscaling", rows, [], note), Block(title, grid, ["arrived (s)", "active", "requests", "SLO met"])]


def summary_blocks(result) -> tuple[list[tuple[str, str]], list[Block]]:
    """The setup rows and the summary's tables for a run's result."""
    s, summary = result.scenario, result.summary
    setup = setup_rows(s, summary)
    caching = any(r.scheduler.prefix_caching for r in s.replica_specs)
    if summary.get("classes"):
        blocks = [class_latency_block(summary), class_block(summary, s)]
        slo = "each class its own (above)"
    else:
        blocks = [latency_block(summary)]
        slo = slo_text(s.slo) if has_slo(s) else "none set: every finished request counts as meeting it"
    price = price_text(s)
    if "autoscale" in summary:
        price = f"the GPU-hours held, of up to {price}"
    blocks.append(results_block(summary, s.num_gpus, caching, slo, price))
    if "autoscale" in summary:
        blocks += autoscale_blocks(summary)
    blocks.append(Block(*band_table(result)))
    return setup, blocks
