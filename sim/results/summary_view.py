"""A run's summary as tables of text, the same in the terminal and in report.html: what was
simulated, the SLO, latencies in ms (mean, p50, p90, p99), throughput with the drain
explained, goodput and SLO attainment, per class when there are classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.results import fmt
from sim.results.describe import class_slo, has_slo, setup_rows, slo_text

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


def results_block(summary: dict, num_gpus: int, prefix_caching: bool, slo: str) -> Block:
    """SLO attainment, goodput, throughput (with the drain explained), requests and engine."""
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
    span, duration = s.get("arrival_span_s"), s.get("duration_s")
    if not fmt.missing(span) and not fmt.missing(duration):
        drain = max(duration - span, 0.0)
        rows.append(["measured over", f"{fmt.duration(duration)}: {fmt.duration(span)} of arrivals "
                     f"+ {fmt.duration(drain)} to drain (offered {fmt.rate(s.get('offered_rate'))})"])
    rows.append(["requests", f"{s['finished']:,} finished, {s['rejected']:,} rejected"
                 + (f", {s['unfinished']:,} unfinished" if s.get("unfinished") else "")
                 + f", {fmt.plural(s['preemptions'], 'preemption')}"])
    engine = []
    if "mean_batch_size" in s:
        engine.append(f"mean batch {fmt.num(s['mean_batch_size'])} sequences")
    if "mean_kv_utilization" in s:
        engine.append(f"KV cache {fmt.pct(s['mean_kv_utilization'])} in use")
    if prefix_caching or s.get("prefix_hit_rate"):
        engine.append(f"prefix cache hits {fmt.pct(s.get('prefix_hit_rate'))} of prompt tokens")
    if engine:
        rows.append(["engine (time-weighted)", ", ".join(engine)])
    rows.append(["mean lengths", f"{fmt.num(s.get('mean_prompt_tokens'))} prompt, "
                 f"{fmt.num(s.get('mean_output_tokens'))} output tokens"])
    note = ("Goodput: requests per second that finished within every SLO limit. Throughput and goodput "
            "are over the span from the first arrival to the last completion, so they read below the "
            "offered rate by the drain even when every request is served.")
    return Block("Results", rows, [], note)


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
    blocks.append(results_block(summary, s.num_gpus, caching, slo))
    return setup, blocks
