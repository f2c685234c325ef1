"""What was simulated, in words: model, GPUs and their layout, scheduler, traffic, SLO."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sim.results import fmt
from sim.results.money import price_sources
from sim.vocab import RESERVING

POLICY_NAMES = {"static": "static batching", "continuous": "continuous batching",
                "chunked-prefill": "chunked prefill", "slots": "fixed slots"}
ROLE_NAMES = {"colocated": "", "prefill": "prefill pool: ", "decode": "decode pool: "}


def model_text(s) -> str:
    m = s.model_spec
    q = s.quantization
    dtypes = []
    if q.weights and q.weights != m.dtype:
        dtypes.append(f"{q.weights} weights")
    if q.kv_cache and q.kv_cache != m.dtype:
        dtypes.append(f"{q.kv_cache} KV cache")
    moe = f", MoE {m.num_experts} experts (top {m.experts_per_token})" if m.num_experts > 1 else ""
    return f"{m.name} ({m.num_params / 1e9:.1f}B params, {', '.join(dtypes) or m.dtype}{moe})"


def _layout(hw) -> str:
    parts = []
    if hw.tp > 1:
        parts.append(f"TP {hw.tp}" + (" with expert parallelism" if hw.expert_parallel else ""))
        gpu = hw.gpu_spec
        if hw.tp > gpu.link_domain:
            parts[-1] += (f" across {gpu.domains_spanned(hw.tp)} domains of {gpu.link_domain} "
                          f"({gpu.interconnect} within, {gpu.scale_out} between)")
    if hw.pp > 1:
        parts.append(f"PP {hw.pp}")
    return ", ".join(parts)


def hardware_text(s) -> str:
    """Replica groups as "2 × H100-SXM" or "1 × (2 × A100-80GB, TP 2)", and the GPU total:
    "2 × H100-SXM + 1 × (2 × A100-80GB, TP 2): 4 GPUs"."""
    groups = Counter((r.role, r.hardware.gpu_name, r.hardware.tp, r.hardware.pp, r.hardware.expert_parallel)
                     for r in s.replica_specs)
    hws = {(r.role, r.hardware.gpu_name, r.hardware.tp, r.hardware.pp, r.hardware.expert_parallel): r.hardware
           for r in s.replica_specs}
    parts = []
    for key, n in groups.items():
        hw = hws[key]
        unit = hw.gpu_name if hw.num_gpus == 1 else f"({hw.num_gpus} × {hw.gpu_name}, {_layout(hw)})"
        parts.append(f"{ROLE_NAMES[key[0]]}{n} × {unit}")
    joiner = "; " if s.disaggregation is not None else " + "
    replicas = len(s.replica_specs)
    return (f"{joiner.join(parts)}: {fmt.plural(s.num_gpus, 'GPU')}, "
            f"{fmt.plural(replicas, 'replica')}")


def gpu_rows(s) -> list[tuple[str, str]]:
    """A row per GPU the user should see spelled out: one defined in the scenario (its figures), or
    one named by an ambiguous family name (which card it was read as)."""
    rows, seen = [], set()
    for r in s.replica_specs:
        hw = r.hardware
        if hw.gpu_name in seen:
            continue
        seen.add(hw.gpu_name)
        g = hw.gpu_spec
        if not isinstance(hw.gpu, str):
            peaks = ", ".join(f"{getattr(g, f) / 1e12:,.0f} {k}" for k, f in
                              (("bf16", "bf16_flops"), ("fp8", "fp8_flops"), ("fp4", "fp4_flops"),
                               ("int8", "int8_flops")) if getattr(g, f))
            rows.append((f"GPU {g.name}", f"defined in the scenario: {g.memory_bytes / 2**30:,.1f} GiB, "
                         f"{g.hbm_bandwidth / 1e12:g} TB/s HBM, {peaks} TFLOP/s dense, {g.interconnect} "
                         f"{g.interconnect_bandwidth / 1e9:,.0f} GB/s within {g.link_domain} GPUs, "
                         f"{g.scale_out or 'no link'} beyond, {g.arch or 'default'} efficiencies"))
        elif hw.gpu_resolution:
            rows.append(("GPU", f"{hw.gpu_resolution} ({g.source})"))
    return rows


def scheduler_text(sch) -> str:
    bits = [POLICY_NAMES[sch.policy]]
    if sch.policy == "static":
        bits.append(f"batches of {sch.batch_size}, {fmt.duration(sch.batch_timeout_s)} timeout")
    elif sch.policy == "chunked-prefill":
        bits.append(f"{sch.chunk_size:,}-token step budget, ≤ {sch.max_num_seqs} sequences")
    elif sch.policy == "slots":
        bits.append(f"{sch.max_num_seqs} slots of {sch.slot_context:,} tokens, {sch.chunk_size:,}-token batches")
    else:
        bits.append(f"≤ {sch.max_batched_tokens:,} tokens and {sch.max_num_seqs} sequences per step")
    if sch.policy not in RESERVING:
        bits.append(f"preemption by {sch.preemption}")
    if sch.prefix_caching:
        bits.append("prefix caching")
    if sch.speculative:
        sp = sch.speculative
        bits.append(f"speculative decoding ({sp.draft_model or sp.method} drafts {sp.num_tokens}, "
                    f"{acceptance_text(sp)}, {sp.mean_length:.2f} tokens per verify step)")
    return ", ".join(bits)


def acceptance_text(sp) -> str:
    """A speculative scheduler's acceptance: one rate, or each position's (given the ones before)."""
    if sp.acceptance_rate is not None:
        return f"acceptance {sp.acceptance_rate:.3g}"
    return "acceptance by position " + "/".join(f"{p:.3g}" for p in sp.rates)


def scheduler_rows(s) -> list[tuple[str, str]]:
    """One row, or one per replica group whose scheduler differs."""
    seen: dict[str, list[int]] = {}
    for r in s.replica_specs:
        seen.setdefault(scheduler_text(r.scheduler), []).append(r.index)
    if len(seen) == 1:
        return [("scheduler", next(iter(seen)))]
    return [(f"scheduler (replicas {index_ranges(idx)})", text) for text, idx in seen.items()]


def index_ranges(idx: list[int]) -> str:
    """Ascending replica indices with each run of three or more as "first–last" ("0–4999, 6000"),
    so a large fleet's groups stay one short line."""
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) >= 3 else ", ".join(map(str, r)) for r in runs)


def _arrival_text(a, scale: float) -> str:
    from sim.traffic.rates import rate_text

    p = a.process
    if p == "poisson":
        return f"Poisson arrivals, {rate_text(a.rate, scale)}"
    if p == "gamma":
        return f"bursty arrivals (gamma, CV {a.cv:g}), {rate_text(a.rate, scale)}"
    if p == "constant":
        return f"evenly spaced arrivals, {rate_text(a.rate, scale)}"
    if p == "closed":
        think = f", {fmt.duration(a.think_time_s)} think time" if a.think_time_s else ""
        return f"closed loop: {a.concurrency} users, each sends its next request when the last is done{think}"
    return f"arrival times from {Path(a.path).name}"


def stream_text(st, scale: float = 1.0) -> str:
    if st.trace is not None:
        t = st.trace
        scaled = f", rescaled to {fmt.num(t.rate)} req/s" if t.rate else (
            f", time × {t.time_scale:g}" if t.time_scale != 1 else "")
        window = f", {fmt.duration(t.duration_s)} from {fmt.duration(t.start_s)}" if t.duration_s else ""
        text = f"{t.format} trace {Path(t.path).name}{scaled}{window}"
        if st.arrival.process == "closed":
            text += "; " + _arrival_text(st.arrival, scale)
    else:
        text = _arrival_text(st.arrival, scale)
    if st.conversations is not None:
        text = text.replace("req/s", "sessions/s") + ", multi-turn sessions"
    if st.shared_prefix is not None:
        sp = st.shared_prefix
        text += f", {fmt.plural(sp.num_prompts, 'shared system prompt')} of {sp.length:,} tokens"
    return text


def traffic_text(s) -> str:
    w = s.workload
    if w.classes is None:
        return stream_text(w, w.rate_scale)
    return "; ".join(f"{c.name}: {stream_text(c, w.rate_scale)}" for c in w.classes)


def slo_text(slo) -> str:
    """"TTFT ≤ 500 ms, TPOT ≤ 50 ms", or "none" when the SLO sets no limit."""
    parts = [f"{name} ≤ {fmt.duration(v)}" for name, v in
             (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s), ("E2E", slo.e2e_s)) if v is not None]
    return ", ".join(parts) or "none"


def class_slo(s, name: str):
    """The SLO a class's requests are held to: its own limits where it sets them, else the
    scenario's."""
    from sim.traffic.schema import Slo

    base = s.slo
    for c in s.workload.classes or ():
        if c.name == name:
            own = c.slo
            return Slo(**{k: getattr(own, k) if getattr(own, k) is not None else getattr(base, k)
                          for k in ("ttft_s", "tpot_s", "e2e_s")})
    return base


def has_slo(s) -> bool:
    slos = [s.slo, *(c.slo for c in s.workload.classes or ())]
    return any(v is not None for x in slos for v in (x.ttft_s, x.tpot_s, x.e2e_s))


def offered_text(summary: dict) -> str:
    """The load offered, as measured from the arrivals: "9.91 req/s (1,000 requests in 100.9 s)"."""
    n, span = summary.get("requests", 0), summary.get("arrival_span_s")
    if not n:
        return "no requests"
    if fmt.missing(span) or not span:
        return fmt.plural(n, "request")
    return f"{fmt.rate(summary.get('offered_rate'))} ({fmt.plural(n, 'request')} arriving over {fmt.duration(span)})"


def setup_rows(s, summary: dict) -> list[tuple[str, str]]:
    """(what, description) rows saying what was simulated."""
    rows = [("model", model_text(s)), ("hardware", hardware_text(s)), *gpu_rows(s)]
    rows += scheduler_rows(s)
    if len(s.replica_specs) > 1 or s.disaggregation is not None:
        router = s.router.policy
        if s.disaggregation is not None:
            link = s.disaggregation.link
            router += (f"; KV moves over {link.type} ({fmt.num(link.bandwidth / 1e9)} GB/s per GPU"
                       + (", layer by layer" if link.layerwise_overlap else "") + ")")
        rows.append(("router", router))
    rows.append(("traffic", traffic_text(s)))
    rows.append(("offered load", offered_text(summary)))
    if s.workload.classes is None:
        rows.append(("SLO", slo_text(s.slo) if has_slo(s) else
                     "none set: every finished request counts as meeting it"))
    else:
        rows.append(("SLO", "; ".join(f"{c.name}: {slo_text(class_slo(s, c.name))}" for c in s.workload.classes)))
    rows.append(("step costs", cost_text(s)))
    rows.append(("GPU prices", price_sources(s)))
    from sim.results.energy import power_text  # here: sim.pricing loads the compiled core (test_build.py)

    rows.append(("GPU power", power_text(s)))
    return rows


def cost_text(s) -> str:
    """How steps are priced: the roofline with the engine preset's overheads (and any constant
    the scenario sets), or a measured profile."""
    cost = s.cost
    if cost.model != "roofline":
        return f"measured profile {Path(cost.profile or '').name}"
    step = cost.step_overhead_s if cost.step_overhead_s is not None else s.engine.cost.step_overhead_s
    given = [f"{cost.compute_efficiency:g} of peak FLOP/s" if cost.compute_efficiency is not None else "",
             f"{cost.memory_efficiency:g} of HBM bandwidth" if cost.memory_efficiency is not None else ""]
    from sim.scenario.specs.efficiency import calibrated

    fitted = all(r.gpu.arch in calibrated()["gpus"] for r in s.replica_specs)
    eff = "the GPU's fitted efficiencies" if fitted else "default efficiencies (no published case fitted for this GPU)"
    return (f"roofline with {s.engine.name}'s overheads ({fmt.duration(step)} per step) and {eff}"
            + "".join(f"; {g}" for g in given if g))
