"""``servesim calibrate --endpoint URL``: probe a server, fit a profile, infer its scheduler.

Phases (a progress bar each): warm-up; TTFT against prompt length (and the token budget per
step from ``/metrics``); max running sequences (``/metrics``); ITL against concurrent decodes
and their context; a prefill among running decodes; a speed probe (kept in the profile, so
that validation can tell the server's drift from the model's error); saturation (a closed
loop at full concurrency, simulated with the fitted profile as a check).
"""

from __future__ import annotations

import datetime as dt
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from endpoint import fit as fitting
from endpoint import server_info
from endpoint.loadgen import Options
from endpoint.probes import ProbeData, Prober, steady_gaps
from endpoint.prompts import PromptBuilder, WordVocab
from sim.errors import InputError
from sim.pricing.profile import Device, LinearFit, Ops, Profile, Table

SPEED_PROBE = (256, 16, 2)  # lone requests one after another: prompt, output tokens, how many
SPEED_BATCH = (8, 128, 32)  # then requests at once, prompt, output tokens: a loaded server's steps
SATURATION = (256, 64)  # the closed loop's prompt and output tokens
MAX_SEQS_PROBE = (16, 48)  # the sequence-limit probe's requests: prompt and output tokens
MIN_CONTEXT = 336  # the longest fixed probe (saturation: 256 + 64) and room for a few tokens more


@dataclass
class Settings:
    url: str
    model: str  # served name
    sim_model: str | dict  # scenario ``model:`` value (catalog name or {hf_config: ...})
    quick: bool = False
    max_seqs: int | None = None  # known limits skip their probe
    budget: int | None = None
    device_type: str = "cpu"
    seed: int = 0
    progress: bool = True
    request_timeout: float = 600.0  # seconds per probe request
    time_limit: float | None = None  # seconds for the whole calibration (a hard stop)
    time_budget: float | None = 600.0  # seconds the probes are planned to fit in (rounds, saturation)
    notes: list[str] = field(default_factory=list)


def grid(s: Settings, max_len: int) -> dict:
    cap = max_len - 8
    if s.quick:
        return {"ttft_prompts": [p for p in (16, 128, 512, 1024) if p <= cap], "rounds": 2,
                "decode_points": [(1, 32), (2, 32), (4, 32), (6, 32), (1, 256), (2, 256)], "decode_tokens": 16,
                "mixed_batches": [2], "mixed_prompts": [0.25, 0.5], "max_seqs_requests": 24,
                "saturation_requests": 8, "budget_tokens": 4096}
    # decodes (b requests of c-token prompts at once): every batch size at a short context (the
    # shape of the cost in b: where the floor ends), a few at longer ones (the KV-read term)
    points = [(b, 32) for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)] + [(1, 512), (4, 512), (16, 512),
                                                                        (1, 1536), (4, 1536)]
    prompts = [8, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2000]
    # decodes at the longest context a probe reaches (its prompt, then 32 new tokens): validation's
    # long prompts decode there (a 1,024-token slot's 900-token decodes were extrapolated before)
    far = cap - 48
    if far > 600:
        points += [(1, far), (4, far)]
    if cap > 2600:  # a longer context: its prompts, and decodes between, too
        prompts += [(2000 + cap) // 2]
        points += [(2, (far + 1536) // 2)]
    if all(abs(p - cap) > 0.1 * cap for p in prompts if p <= cap):  # the longest prompt it takes
        prompts.append(cap)
    return {"ttft_prompts": [p for p in prompts if p <= cap],
            "rounds": 3, "decode_points": points, "decode_tokens": 32,
            "mixed_batches": [1, 4, 12], "mixed_prompts": [0.25, 0.5, 0.9],
            "max_seqs_requests": 64, "saturation_requests": 40, "budget_tokens": 8192}


def probe_design() -> dict:
    """What the speed probe sends (a validation compares its probe with calibration's only when
    both sent the same)."""
    return {"lone": list(SPEED_PROBE), "batch": list(SPEED_BATCH)}


def speed_probe(prober: Prober) -> dict[str, float]:
    """How fast the server is right now, where serving spends its time: a few lone requests
    (a prefill, decodes of one) and a batch at once (prefill chunks, then steps of b decodes).
    ``probe_s``: the lone requests' median E2E plus the batch's median E2E."""
    import asyncio

    p, out, n = SPEED_PROBE
    lone = [asyncio.run(prober.send([prober.request(p, out)], "speed probe, lone requests")).records[0]
            for _ in range(n)]
    b, bp, bout = SPEED_BATCH
    batch = asyncio.run(prober.send([prober.request(bp, bout) for _ in range(b)], "speed probe, a batch")).records
    steady = steady_gaps(batch, bp, b)
    lone_e2e = float(np.median([r.last_token - r.sent for r in lone]))
    batch_e2e = float(np.median([r.last_token - r.sent for r in batch]))
    return {"ttft_s": float(np.median([r.first_token - r.sent for r in lone])),
            "itl_s": float(np.median([g for r in lone for g in r.gaps])),
            "batch_itl_s": steady.seconds if steady else float("nan"),
            "lone_e2e_s": lone_e2e, "batch_e2e_s": batch_e2e, "probe_s": lone_e2e + batch_e2e}


def calibrate(s: Settings, vocab: WordVocab, log=print, data: ProbeData | None = None
              ) -> tuple[Profile, dict, ProbeData]:
    """Run the probes; returns the profile, the scenario fragment and the raw measurements
    (``data``: filled as the probes go, so that a caller keeps them when one fails)."""
    from calibration.progress import ticker

    info = server_info.read(s.url)
    if info.problems:
        raise InputError("--endpoint", s.url, info.problems[0])
    ident = info.as_dict()
    s.notes += published_notes(info)
    published = info.context_for(s.model)
    max_len = published or 2048
    if published is None:
        s.notes.append("context per sequence: not published; assumed 2048 tokens")
    if max_len < MIN_CONTEXT:
        raise InputError("--endpoint", s.url, f"the server gives one sequence {max_len} tokens "
                                              f"({info.sources.get('context_per_seq')}); calibration's probes need "
                                              f"at least {MIN_CONTEXT}: expected a larger context per sequence")
    has_metrics = info.metrics
    g = grid(s, max_len)
    opts = Options(url=s.url, model=s.model, timeout_s=s.request_timeout)
    block = info.block_size or 16
    rng = np.random.default_rng(s.seed)
    data = ProbeData() if data is None else data
    t_all = time.perf_counter()
    with ticker(s.progress) as bar:
        prober = Prober(opts, PromptBuilder(vocab, block, s.seed), bar.tick, has_metrics,
                        time_limit_s=s.time_limit)
        prober.context = max_len

        def phase(name: str, total: int):
            bar.stage(name, total)
            prober.phase = name
            data.phases_s[name] = -time.perf_counter()

        def end(name: str):
            data.phases_s[name] += time.perf_counter()

        phase("warm-up", 4)
        for p in (16, 64, 256, 16):
            prober.ttft([p], 1, rng)
        end("warm-up")
        # the speed probe at the start and after every round: the calibration's average speed,
        # for validation to compare its own probe with (the drift)
        probes = [speed_probe(prober)]

        sizes = sorted({max_len - 8, (max_len - 8) * 3 // 4, (max_len - 8) // 2})
        phase("token budget per step", len(sizes) + 1)
        # the decode must outlast the longest prompt's prefill (then it is cancelled)
        big = prober.ttft([sizes[-1]], 1, rng)[0]
        itl = big.itl if np.isfinite(big.itl) and big.itl > 0 else 0.01
        out = int(min(max_len - 80, 60 + 3 * big.ttft / itl))
        for p in sizes:
            data.chunks.append((p, prober.chunks(p, out)))
        end("token budget per step")
        budget, why = ((s.budget, "given") if s.budget else
                       (info.token_budget, f"published ({info.sources.get('token_budget')})") if info.token_budget
                       else fitting.infer_budget(data.chunks))
        if budget is None:
            s.notes.append(f"token budget per step: {why}; assumed {max_len} (max_model_len)")
            budget = max_len
        else:
            s.notes.append(f"token budget per step {budget}: {why}")

        max_seqs = s.max_seqs
        if max_seqs is None and info.max_seqs is not None:
            max_seqs = info.max_seqs
            s.notes.append(f"max running sequences {max_seqs}: published ({info.sources.get('max_seqs')})")
        if max_seqs is None:
            phase("max running sequences", 1)
            n = g["max_seqs_requests"]
            data.max_seqs_sent = n
            data.max_running = prober.max_seqs(n, *MAX_SEQS_PROBE)
            end("max running sequences")
            if data.max_running is None:
                max_seqs = 256
                s.notes.append("max running sequences: no running-requests gauge in /metrics; assumed 256")
            elif data.max_running >= n:
                max_seqs = max(256, n)
                s.notes.append(f"max running sequences: all {n} probe requests ran at once; assumed {max_seqs}")
            else:
                max_seqs = int(data.max_running)
                held, per = usable_blocks(info, block), -(-(MAX_SEQS_PROBE[0] + MAX_SEQS_PROBE[1]) // block)
                if held and max_seqs * per > held - per:  # the probes filled the cache: its limit, maybe
                    max_seqs = max(max_seqs, held)
                    s.notes.append(f"max running sequences ≥ {int(data.max_running)}: running requests plateaued "
                                   f"there with {n} sent at once, {per} KV block(s) each, when the cache's {held} "
                                   f"blocks were full, so the server's limit may be higher; taken as {max_seqs} "
                                   "(one block each at most: the KV cache binds before it)")
                else:
                    s.notes.append(f"max running sequences {max_seqs}: running requests plateaued there "
                                   f"with {n} sent at once")

        # Every point once per round, all kinds shuffled together: a slow spell of a shared
        # machine lands on TTFT, decode and mixed points alike (and the fit takes each point's
        # median over the rounds), rather than on one whole phase.
        points = [("ttft", p, 0) for p in g["ttft_prompts"]]
        points += [("decode", b, c) for b, c in decode_points(g, max_seqs, max_len, block, usable_blocks(info, block))]
        # a prompt among b decodes needs b + 1 sequences: a server of few sequences (llama.cpp's
        # slots) is probed up to its fullest mixed step rather than at one decode only
        mixed = sorted({min(b, max_seqs - 1) for b in g["mixed_batches"]} - {0})
        points += [("mixed", b, max(8, int(f * budget) - b)) for b in mixed
                   for f in g["mixed_prompts"] if f * budget < max_len - 8]
        phase("TTFT, decodes, prefill among decodes", len(points) * g["rounds"] + g["rounds"])
        conc, n_sat = min(max_seqs, 16), g["saturation_requests"]
        for k in range(g["rounds"]):
            t_round = time.perf_counter()
            order = list(points)
            rng.shuffle(order)
            for kind, a, b in order:
                if kind == "ttft":
                    data.ttft += prober.ttft([a], 1, rng)
                    continue
                gp = prober.decode(a, b, g["decode_tokens"]) if kind == "decode" else prober.mixed(a, 64, b, 48)
                if gp is not None:
                    data.gaps.append(gp)
            probes.append(speed_probe(prober))
            bar.tick()
            left = g["rounds"] - k - 1
            if left and s.time_budget is not None:
                spent, round_s = time.perf_counter() - t_all, time.perf_counter() - t_round
                sat_s = saturation_seconds(data, conc, n_sat)
                if spent + left * round_s + sat_s > s.time_budget:
                    s.notes.append(f"time budget {s.time_budget:g} s: {k + 1} of {g['rounds']} rounds of probes "
                                   f"(one took {round_s:.0f} s; {spent:.0f} s spent, the saturation loop "
                                   f"~{sat_s:.0f} s)")
                    bar.tick(left * (len(points) + 1))
                    break
        end("TTFT, decodes, prefill among decodes")
        speed = {k: float(np.mean([p[k] for p in probes])) for k in probes[0]}
        speed["each_s"] = [p["probe_s"] for p in probes]

        f = fit_measurements(data, budget, s.url)
        kv_blocks = (kv_blocks_of(info.cache_config, _sim_spec(s), block, max_seqs, s.notes, info.engine)
                     if info.cache_config
                     else info.kv_blocks(block))
        sched = scheduler_of(info, budget, max_seqs, block, max_len)
        profile = _profile(s, ident, f, sched, kv_blocks, data, speed)
        fragment = _fragment(s, sched, kv_blocks)

        n = n_sat
        if s.time_budget is not None:  # fewer requests (not fewer than two waves) where time is short
            spent, sat_s = time.perf_counter() - t_all, saturation_seconds(data, conc, n_sat)
            if spent + sat_s > s.time_budget:
                n = min(n_sat, max(2 * conc, int(n_sat * max(s.time_budget - spent, 0.0) / sat_s)))
            if n < n_sat:
                s.notes.append(f"time budget {s.time_budget:g} s: the saturation loop ran {n} of {n_sat} "
                               f"requests ({spent:.0f} s spent, {n_sat} would take ~{sat_s:.0f} s)")
        phase("saturation (closed loop)", n)
        recs, dur = prober.saturation(conc, n, *SATURATION)
        end("saturation (closed loop)")
        data.saturation = {"concurrency": conc, "requests": n, "prompt": SATURATION[0], "output": SATURATION[1],
                           "measured_req_per_s": sum(1 for r in recs if not r.error) / dur,
                           "records": recs}
    data.phases_s["total"] = time.perf_counter() - t_all
    return profile, fragment, data


def null_blocks(engine: str | None, n: int) -> int:
    """Blocks of the ``n`` a server publishes that no request ever holds: vLLM V1 keeps one as its
    null block (vllm/v1/core/block_pool.py: BlockPool takes it off the free queue at start)."""
    return 1 if engine == "vllm" and n > 1 else 0


def usable_blocks(info: server_info.ServerInfo, block: int) -> int | None:
    """The server's KV cache in its own blocks of ``block`` tokens, less those no request holds."""
    n = info.kv_blocks(block)
    return None if n is None else n - null_blocks(info.engine, n)


def decode_points(g: dict, max_seqs: int, max_len: int, block: int, kv_blocks: int | None) -> list[tuple[int, int]]:
    """The grid's decode probes (b requests of c-token prompts at once) that the server can run
    all at once: within its sequence limit and context, and, where its KV cache is known, within
    it (b requests of c + the decode's tokens, in whole blocks): a point beyond the cache probes
    the longest context that fits at its batch, and the sequence limit is probed at the longest
    context up to 512 that fits (the shapes a loaded server runs), so every probe yields a step."""
    out = g["decode_tokens"]

    def fitting(b: int, c: int) -> int:
        if kv_blocks is None:
            return c
        per = kv_blocks // b  # blocks each of b requests may hold
        return min(c, per * block - out - 1)

    points: list[tuple[int, int]] = []
    for b, c in [*g["decode_points"], (max_seqs, 512)]:
        c = fitting(b, c)
        if (b <= max_seqs and c >= 16 and b * c <= g["budget_tokens"] and c + out < max_len
                and (b, c) not in points):
            points.append((b, c))
    return points


def saturation_seconds(data: ProbeData, concurrency: int, n: int) -> float:
    """About how long the saturation loop (``n`` requests, ``concurrency`` at a time, SATURATION's
    prompt and output) takes, from the probes so far: per wave of ``concurrency`` requests,
    their prefills one after another and the output's decode steps at that batch (an upper
    estimate: prefills and decodes share steps)."""
    prompt, out = SATURATION
    ttft = sorted((t.prompt, t.ttft) for t in data.ttft)
    decode = [(g.batch, g.seconds) for g in data.gaps if g.kind == "decode"]
    if not ttft or not decode:
        return 0.0
    first = float(np.interp(prompt, [p for p, _ in ttft], [t for _, t in ttft]))
    nearest = min(abs(b - concurrency) for b, _ in decode)
    step = float(np.median([x for b, x in decode if abs(b - concurrency) == nearest]))
    return n / concurrency * (concurrency * first + out * step)


def fit_measurements(data: ProbeData, budget: int, url: str) -> fitting.Fit:
    """The fit, or a refusal that says which measurements are missing or unusable."""
    from sim.errors import InputError

    bad = [t for t in data.ttft if not (np.isfinite(t.ttft) and t.ttft > 0)]
    bad += [g for g in data.gaps if not (np.isfinite(g.seconds) and g.seconds > 0)]
    if bad:
        raise InputError("--endpoint", url, f"{len(bad)} probe measurement(s) are not positive times "
                         f"(e.g. {bad[0]}): nothing fitted")
    if not any(g.kind == "decode" for g in data.gaps):
        raise InputError("--endpoint", url, "no decode probe gave steady gaps between tokens (every batch's "
                         "requests must decode together for a few tokens): nothing fitted")
    try:
        return fitting.fit(data.ttft, data.gaps, budget)
    except ValueError as e:
        raise InputError("--endpoint", url, f"the probes cannot be fitted: {e}") from None


def keep_partial(data: ProbeData, out: Path) -> Path:
    """The measurements of a calibration that stopped, beside where the profile would go."""
    from dataclasses import asdict

    from endpoint.records import write_json

    return write_json(out.with_suffix(".partial.json"), {
        "note": "measurements of a calibration that did not finish; no profile was written",
        **asdict(data)})


def _sim_spec(s: Settings):
    from sim.scenario.load import scenario_from_dict

    return scenario_from_dict({"model": s.sim_model}, "--sim-model").model_spec


def kv_blocks_of(cache: dict, spec=None, block: int | None = None, max_seqs: int = 0,
                 notes: list[str] | None = None, engine: str = "vllm") -> int | None:
    """The server's KV cache in servesim's blocks (``block`` tokens of every KV-cached layer).

    vLLM's ``num_gpu_blocks`` is that where every layer caches the same (one group of all
    layers). Its hybrid allocator (sliding-window or Mamba / linear-attention layers beside
    full attention) cuts the same memory into blocks of one layer group instead, so there it
    counts blocks several times smaller than servesim's (Gemma-3 shape, 5 sliding : 1 full: six
    times). For such a model, where the server publishes its KV memory
    (``kv_cache_memory_bytes``, KV dtype ``auto``: the model's), the blocks are that memory, less
    the state ``max_seqs`` requests hold where the engine reserves it (``state_memory`` of its
    preset: vLLM V1 takes it from the same blocks per running request instead), over one servesim
    block's bytes. vLLM's null block is not counted."""
    try:
        n = int(cache["num_gpu_blocks"])
    except (KeyError, ValueError, TypeError):
        return None
    null = null_blocks(engine, n)
    if spec is None or not block or not (spec.windowed_layers or spec.state_bytes_per_request()):
        return n - null
    try:
        mem = float(cache["kv_cache_memory_bytes"])
    except (KeyError, ValueError, TypeError):
        return n - null
    if cache.get("cache_dtype", "auto") != "auto" or not spec.kv_bytes_per_token():
        return n - null
    mem *= (n - null) / n
    from sim.scenario.engines import presets

    pooled = presets().get(engine, {}).get("state_memory", "reserved") == "pool"
    state = 0.0 if pooled else spec.state_bytes_per_request() * max_seqs
    blocks = max(1, int((mem - state) // (block * spec.kv_bytes_per_token())))
    if notes is not None:
        notes.append(f"KV blocks {blocks}: the server's {mem / 2**20:.1f} MiB of KV cache"
                     + (f" less {state / 2**20:.1f} MiB of state for {max_seqs} requests" if state else "")
                     + (" (each running request's state taken from them)" if pooled and spec.state_bytes_per_request()
                        else "")
                     + f" over {block} tokens of every layer (vLLM's hybrid allocator counts {n} blocks "
                       "of one layer group)")
    return blocks


def published_notes(info: server_info.ServerInfo) -> list[str]:
    """What the server published, said once at the top of the profile's notes."""
    keys = ("context_per_seq", "max_seqs", "token_budget", "kv_tokens", "block_size", "kv_layout")
    known = [f"{k} {getattr(info, k)} ({info.sources[k]})" for k in keys if getattr(info, k) is not None]
    notes = [f"server: {info.engine} {info.version or '(version not published)'}; publishes "
             + ("; ".join(known) if known else "none of its limits")]
    notes += info.notes
    return notes


def scheduler_of(info: server_info.ServerInfo, budget: int, max_seqs: int, block: int, context: int) -> dict:
    """The scenario's scheduler for the server: fixed slots where each sequence has its own
    context (llama.cpp), else chunked prefill over a shared pool."""
    if info.kv_layout == "slots":
        return {"policy": "slots", "max_num_seqs": max_seqs, "slot_context": context,
                "chunk_size": max(budget, max_seqs), "block_size": block}
    return {"policy": "chunked-prefill", "max_num_seqs": max_seqs, "chunk_size": budget, "block_size": block,
            "prefix_caching": False}


def _profile(s: Settings, ident: dict, f: fitting.Fit, sched: dict, kv_blocks: int | None,
             data: ProbeData, speed: dict) -> Profile:
    spec = _sim_spec(s)
    shape = {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size, "num_heads": spec.num_heads,
             "num_kv_heads": spec.num_kv_heads, "intermediate_size": spec.intermediate_size,
             "vocab_size": spec.vocab_size}
    step = LinearFit(features=f.features(), coef=f.step_coef(), r2=f.r2, ranges=f.ranges)
    # the schema wants per-op tables; an endpoint has none: the step fit's token line stands in
    # (prefer: step, so it is never used for pricing)
    lo, hi = 1.0, float(max(sched["chunk_size"], 2))
    c0, c1 = f.coef["const"], f.coef["num_tokens"]
    linear = Table(x=[lo, hi], seconds=[c0 + c1 * lo, c0 + c1 * hi])
    server = {k: ident.get(k) for k in ("url", "version", "engine", "models", "context_per_seq", "max_seqs",
                                        "token_budget", "kv_tokens", "block_size", "kv_layout", "sources")}
    grid = {"server": server, "cache_config": ident.get("cache_config", {}),
            "scheduler": {**{k: v for k, v in sched.items() if k != "prefix_caching"}, "kv_blocks": kv_blocks},
            "fit": {"step": f.stats, "coef": f.coef, "floor_s": f.floor},
            "probe": speed, "probe_s": speed["probe_s"], "probe_design": probe_design(), "phases_s": data.phases_s,
            "measurements": {"ttft": [vars(t) for t in data.ttft], "gaps": [vars(g) for g in data.gaps],
                             "max_running": data.max_running, "max_seqs_sent": data.max_seqs_sent,
                             "prefill_steps": data.chunks}}
    return Profile(schema_version=1, source="endpoint", created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), device=Device(name=f"{ident.get('engine', 'server')} {ident.get('version') or ''} "
                                           f"at {ident.get('url')} on {platform.node()}".strip(),
                                           type=s.device_type),
        model=spec.name, model_shape=shape, dtype=spec.dtype, tp=1,
        versions={"server": str(ident.get("version")), "python": platform.python_version()},
        grid=grid, ops=Ops(linear=linear), step=step, prefer="step", overhead_s=0.0,
        request_overhead_s=f.request_overhead_s, notes=list(s.notes))


def _fragment(s: Settings, sched: dict, kv_blocks: int | None) -> dict:
    frag = {"model": s.sim_model, "scheduler": dict(sched), "cost": {"model": "profile", "profile": "profile.json"}}
    if sched["policy"] == "slots":
        frag["engine"] = "llama.cpp"  # the slots' contexts are its KV cache
    elif kv_blocks:
        frag["hardware"] = {"kv_blocks": kv_blocks}
    return frag


SELF_CHECK = 0.05  # the saturation check's largest relative miss a profile is written with (else --force)


def saturation_check(profile_path: Path, fragment: dict, data: ProbeData, base_dir: Path) -> dict:
    """Simulate the saturation probe's closed loop with the fitted profile; beside the rates,
    each request's TTFT and its time per output token, measured and simulated (medians)."""
    sat = data.saturation
    recs = [r for r in sat["records"] if not r.error]
    out = simulate_saturation(profile_path, fragment, {**sat, "requests": len(recs)}, base_dir)
    out["ttft_measured_s"] = float(np.median([r.first_token - r.sent for r in recs])) if recs else float("nan")
    out["tpot_measured_s"] = float(np.median([(r.last_token - r.first_token) / max(len(r.gaps), 1)
                                              for r in recs])) if recs else float("nan")
    return {**out, "steady_itl_measured_s": _median_itl(recs)}


def disagreement(sat: dict) -> str | None:
    """None when the saturation check is within SELF_CHECK; else what disagrees: the rate, and
    which of the requests' two stages (the wait for the first token: prefill and queueing; the
    decode after it) the simulation misses most."""
    if abs(sat["rel_diff"]) <= SELF_CHECK:
        return None
    parts = []
    for stage, key in (("time to first token (prefill and queueing)", "ttft"), ("time per output token "
                                                                                "(decode steps)", "tpot")):
        m, s = sat.get(f"{key}_measured_s"), sat.get(f"{key}_simulated_s")
        if m and s and m == m and s == s and m > 0:
            parts.append((abs(s / m - 1), f"{stage}: simulated {s * 1e3:.1f} ms, measured {m * 1e3:.1f} ms"))
    worst = f"; most off: {max(parts)[1]}" if parts else ""
    return (f"the profile's saturation check misses by {sat['rel_diff']:+.1%} (closed loop of {sat['concurrency']}: "
            f"simulated {sat['simulated_req_per_s']:.3g} req/s, measured {sat['measured_req_per_s']:.3g}), more than "
            f"{SELF_CHECK:.0%}{worst}")


def simulate_saturation(profile_path: Path, fragment: dict, sat: dict, base_dir: Path) -> dict:
    """The closed loop ``sat`` describes (concurrency, requests, prompt, output, measured rate),
    simulated with the profile."""
    from endpoint.simulate import simulate_measured
    from sim.scenario.load import scenario_from_dict
    from sim.traffic import build_workload

    n = int(sat["requests"])
    frag = {**fragment, "cost": {"model": "profile", "profile": str(Path(profile_path).resolve())}}
    sc = scenario_from_dict({**frag, "name": "saturation", "workload": {
        "num_requests": n, "arrival": {"process": "closed", "concurrency": sat["concurrency"]},
        "prompt_len": {"dist": "fixed", "value": sat.get("prompt", 256)},
        "output_len": {"dist": "fixed", "value": sat.get("output", 64)}}}, "<saturation>", base_dir)
    w = build_workload(sc)
    res = simulate_measured(sc, w, np.zeros(n), closed=sat["concurrency"])
    fin = res.requests[res.requests["status"] == "finished"]
    sim_rate = len(fin) / float(fin["completion"].max())
    measured = sat["measured_req_per_s"]
    return {"concurrency": sat["concurrency"], "requests": n, "measured_req_per_s": measured,
            "simulated_req_per_s": sim_rate, "rel_diff": sim_rate / measured - 1,
            "ttft_simulated_s": float(fin["ttft"].median()), "tpot_simulated_s": float(fin["tpot"].median())}


def refit(profile: Profile, how: str = "median", floor: bool = True) -> Profile:
    """The profile fitted again from the probe measurements it keeps (``grid.measurements``)
    with the current fit: a change to the fit, tried on committed calibrations without a server."""
    from endpoint.probes import GapPoint, TtftPoint

    g = profile.grid
    m = g["measurements"]
    f = fitting.fit([TtftPoint(**t) for t in m["ttft"]], [GapPoint(**x) for x in m["gaps"]],
                    int(g["scheduler"]["chunk_size"]), floor=floor, how=how)
    step = LinearFit(features=f.features(), coef=f.step_coef(), r2=f.r2, ranges=f.ranges)
    fit_ = {k: v for k, v in g["fit"].items() if k != "saturation"}
    grid = {**g, "fit": {**fit_, "step": f.stats, "coef": f.coef, "floor_s": f.floor,
                         "refit_of": g["fit"].get("refit_of", {"step": g["fit"].get("step"),
                                                               "coef": g["fit"].get("coef")})}}
    if "saturation" in g["fit"]:
        grid["fit"]["saturation_measured"] = {k: g["fit"]["saturation"][k] for k in
                                              ("concurrency", "requests", "measured_req_per_s")}
    notes = [n for n in profile.notes if not n.startswith("refitted")]
    notes.append(f"refitted from the stored probe measurements (repeats: {how}, floor: {floor})")
    return profile.model_copy(update={"step": step, "request_overhead_s": f.request_overhead_s, "grid": grid,
                                      "notes": notes})


def _median_itl(recs) -> float:
    gaps = [g for r in recs for g in r.gaps]
    return float(np.median(gaps)) if gaps else float("nan")


__all__ = ["Settings", "calibrate", "probe_design", "refit", "saturation_check", "simulate_saturation",
           "speed_probe", "steady_gaps"]
