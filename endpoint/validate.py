"""``servesim validate SCENARIO --endpoint URL --profile P``: measure, simulate, compare.

Runs the scenario's requests against the server (``repeats`` times: the second run gives the
measurement's own spread), times the calibration's speed probe before and after, simulates
the very requests the first run sent with the profile (and again slowed by the server's drift
since calibration), and compares per request and in summary with the engine validation's
rules (``calibration.compare``). The server's ``/metrics`` (vLLM: queue, prefill and decode
time per request) split the measured latency into stages beside the simulated ones, so a
miss is attributed to queueing, prefill, decode or the per-request overhead as measured.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.compare import breakdown, diagnose, error_stats, join, spread, summary_diff
from calibration.validate import Validation, stage_means
from endpoint.failures import ServerFailure
from endpoint.server_metrics import scrape
from sim.loops.run import RunResult
from sim.pricing.profile import load_profile
from sim.results.metrics import summarize

STAGES = {"queue_s": "vllm:request_queue_time_seconds", "prefill_s": "vllm:request_prefill_time_seconds",
          "decode_s": "vllm:request_decode_time_seconds", "server_e2e_s": "vllm:e2e_request_latency_seconds"}


def server_stages(before, after) -> dict[str, float]:
    """Mean seconds per request of each stage the server timed between two scrapes."""
    out = {}
    if before is None or after is None:
        return out
    for k, name in STAGES.items():
        a, b = after.histogram((name,)), before.histogram((name,))
        if a and b and a[0] > b[0]:
            out[k] = (a[1] - b[1]) / (a[0] - b[0])
    return out


@dataclass
class MeasuredRun:
    """One measured run, as written to (and read back from) ``runK/``."""

    requests: pd.DataFrame
    stages: dict[str, float]  # the server's own stage means (vLLM /metrics)
    client: dict[str, float]  # the client's overhead
    duration_s: float
    mode: str  # open or closed
    itl: pd.DataFrame | None = None  # its inter-token gaps (request_id, token_index, gap_s)


def measured_result(scenario, run: MeasuredRun) -> RunResult:
    steps = pd.DataFrame({"duration": [], "num_seqs": []})
    return RunResult(scenario, run.requests, steps, summarize(run.requests, steps), [], run.duration_s,
                     f"measured ({run.mode} loop)")


def refuse_failed(run: MeasuredRun, k: int, url: str, kept: Path | None = None) -> None:
    """No score on a run with failed requests: the simulation would replay requests the server
    never served (``endpoint.failures.ServerFailure``, exit 2)."""
    req = run.requests
    failed = (req["status"] != "finished").to_numpy()
    if failed.any():
        errors = [str(e) or "no token: not finished" for e in req.get("error", pd.Series("", req.index))[failed]]
        where = f"the measured requests are in {kept}" if kept is not None else "see each request's error"
        raise ServerFailure(url, f"validation run {k}", errors, len(req), f"not scored; {where}")


def validate(scenario, profile_path: str | Path, url: str, model: str, *, source: str, tokenizer: str | None,
             api: str = "completions", exact: bool = True, repeats: int = 1, out: Path | None = None,
             log=print, progress: bool = True, request_timeout: float = 600.0,
             time_limit: float | None = None, watch=None) -> Validation:
    """Measure the scenario ``repeats`` times between two speed probes, then ``compare``.
    A failed request (or probe) stops it before scoring, its runs written; ``time_limit``
    bounds the probes and runs together. ``watch``: called before and after each run, what
    it returns is kept in the run's ``summary.json`` (``watch: {before, after}``; e.g. each
    replica's request counters behind a router)."""
    from endpoint.calibrate import probe_design, speed_probe
    from endpoint.loadgen import Options
    from endpoint.measure import measure
    from endpoint.probes import Prober
    from endpoint.prompts import PromptBuilder
    from endpoint.records import itl_frame, requests_frame, write_run
    from endpoint.replay import load_vocab
    from endpoint.server_info import read as read_server
    from endpoint.simulate import with_profile
    from sim.pricing import make_cost_model

    load_profile(profile_path, "--profile")
    make_cost_model(with_profile(scenario, profile_path, source))  # shape and TP match? (exit 2)
    vocab = load_vocab(url, tokenizer)
    prober = Prober(Options(url=url, model=model, timeout_s=request_timeout), PromptBuilder(vocab, 16, 99),
                    metrics=False, time_limit_s=time_limit, who="validation")
    prober.context = read_server(url).context_for(model)
    prober.phase = "the speed probe before"
    before = speed_probe(prober)
    runs = []
    if out is not None:
        clear_stale(out, repeats)
    for k in range(repeats):
        prober.phase = f"run {k + 1}"
        m0 = scrape(url)
        w0 = watch() if watch is not None else None
        # each repeat its own prompt words (same lengths, arrivals and sharing): a prefix cache
        # keeps nothing of the run before
        plan, res = measure(scenario, url, model, tokenizer=tokenizer, api=api, exact=exact, source=source,
                            progress=progress, label=f"{scenario.name} run {k + 1}/{repeats}",
                            seed=None if k == 0 else scenario.seed + 7919 * k,
                            request_timeout=request_timeout, time_limit=prober.left())
        stages = server_stages(m0, scrape(url))
        watched = {} if watch is None else {"watch": {"before": w0, "after": watch()}}
        req = requests_frame(res, scenario.slo, plan.workload.class_names, plan.workload.class_id)
        if out is not None:
            write_run(out / f"run{k + 1}", res, req, itl_frame(res),
                      {"scenario": scenario.name, "endpoint": url, "model": model, "server_stages": stages,
                       "duration_s": res.duration_s, **watched})
        runs.append(MeasuredRun(req, stages, res.client, res.duration_s, res.mode, itl_frame(res)))
        refuse_failed(runs[-1], k + 1, url, None if out is None else out / f"run{k + 1}")
    prober.phase = "the speed probe after"
    after = speed_probe(prober)
    context = {"url": url, "model": model, "api": api,
               "speed_probe": {"before": before, "after": after, "design": probe_design()}}
    return compare(scenario, profile_path, runs, context, source=source, log=log)


def clear_stale(out: Path, repeats: int) -> None:
    """Before new runs are written to ``out``: an older validation's scores and its runs
    beyond ``repeats`` go, so that nothing there mixes two validations (a refused one leaves
    its runs and no score)."""
    import shutil

    from calibration.command_io import VALIDATION_FILES

    for name in VALIDATION_FILES:
        (out / name).unlink(missing_ok=True)
    k = repeats + 1
    while (out / f"run{k}").is_dir():
        shutil.rmtree(out / f"run{k}")
        k += 1


def read_runs(folder: Path) -> list[MeasuredRun]:
    """The runs ``validate`` wrote under ``folder`` (run1/, run2/, ...)."""
    import json

    runs = []
    k = 1
    while (folder / f"run{k}" / "requests.parquet").is_file():
        d = folder / f"run{k}"
        meta = json.loads((d / "summary.json").read_text())
        duration = meta.get("duration_s") or meta["bench"]["duration_s"]
        mode = meta.get("mode", "measured (open loop)").split("(")[-1].split()[0]
        itl = pd.read_parquet(d / "itl.parquet") if (d / "itl.parquet").is_file() else None
        runs.append(MeasuredRun(pd.read_parquet(d / "requests.parquet"), meta.get("server_stages") or {},
                                meta.get("client_overhead") or {}, float(duration), mode, itl))
        k += 1
    return runs


def compare(scenario, profile_path: str | Path, runs: list[MeasuredRun], context: dict, *, source: str,
            log=print) -> Validation:
    """Simulate the first run's requests with the profile (and slowed by the server's drift)
    and compare with every measured run (``calibration.compare``'s rules)."""
    from endpoint.replay import closed_loop
    from endpoint.simulate import scaled_profile, simulate_measured, with_profile
    from sim.traffic import build_workload

    profile = load_profile(profile_path, "--profile")
    sim_sc = with_profile(scenario, profile_path, source)
    warnings = []
    if profile.source != "endpoint":
        warnings.append(f"profile from {profile.source!r}, not from an endpoint calibration")
    inferred = profile.grid.get("scheduler", {})
    for k in ("max_num_seqs", "chunk_size", "block_size"):
        if k in inferred and getattr(scenario.scheduler, k) != inferred[k]:
            warnings.append(f"scenario scheduler.{k} = {getattr(scenario.scheduler, k)}, calibration "
                            f"inferred {inferred[k]}")
    probe = context.get("speed_probe", {})
    machine = {}
    if probe:
        machine = {"probe_before_s": probe["before"]["probe_s"], "probe_after_s": probe["after"]["probe_s"]}
        calibrated = profile.grid.get("probe_s")
        design = probe.get("design")
        if design is not None and profile.grid.get("probe_design") != design:
            warnings.append("calibration timed another speed probe than this validation: no drift estimate")
            calibrated = None
        ratio = (machine["probe_before_s"] + machine["probe_after_s"]) / 2 / float(calibrated or "nan")
        if calibrated and np.isfinite(ratio) and ratio > 0:
            machine["probe_calibration_s"] = float(calibrated)
            machine["speed_ratio"] = ratio
        elif calibrated:
            warnings.append(f"the speed probes gave no usable time (before {machine['probe_before_s']}, after "
                            f"{machine['probe_after_s']}, calibration {calibrated}): no drift estimate")

    for k, r in enumerate(runs, start=1):
        refuse_failed(r, k, context.get("url", "?"))
    first = runs[0]
    real = measured_result(scenario, first)
    req = first.requests
    ok = (req["status"] == "finished").to_numpy()
    workload = build_workload(scenario)
    closed, think = closed_loop(scenario)
    sends = req["arrival"].to_numpy()
    prompt = req["prompt_tokens"].to_numpy()
    output = np.where(ok, req["output_tokens"].to_numpy(), req["max_output_tokens"].to_numpy())
    if log:
        log("simulating the same requests with the profile ...")
    sim = simulate_measured(sim_sc, workload, sends, prompt, output, closed=closed, think_s=think)
    joined = join(real.requests, sim.requests)
    adjusted = {}
    if "speed_ratio" in machine:
        with tempfile.TemporaryDirectory() as tmp:
            scaled = scaled_profile(profile, machine["speed_ratio"], Path(tmp) / "scaled.json")
            again = simulate_measured(with_profile(scenario, scaled, source), workload, sends, prompt, output,
                                      closed=closed, think_s=think)
        adjusted = error_stats(join(real.requests, again.requests))
    repeat = None
    errors_repeat: dict = {}
    spread_: dict = {}
    if len(runs) > 1:
        repeat = measured_result(scenario, runs[1])
        spread_ = spread(real.requests, repeat.requests)
        errors_repeat = error_stats(join(repeat.requests, sim.requests))
    # vLLM times queue, prefill (scheduled → first token) and decode in the engine; what the
    # client saw beyond them is waiting too (the API process, the hand-over between steps)
    stages = first.stages
    fin = req[ok]
    real_stages = {"e2e_s": float(fin["e2e"].mean())}
    if {"prefill_s", "decode_s"} <= stages.keys():
        real_stages |= {"prefill_s": stages["prefill_s"], "decode_s": stages["decode_s"],
                        "wait_s": real_stages["e2e_s"] - stages["prefill_s"] - stages["decode_s"]}
    stages_cmp = breakdown(real_stages, stage_means(sim.requests))
    errors = error_stats(joined)
    decode = decode_steps(sim_sc, runs)
    warnings += [f"simulation: {w}" for w in sim.warnings]
    ratio = machine.get("speed_ratio", 1.0)
    if abs(ratio - 1) > 0.1:
        warnings.append(f"the server ran the speed probe {abs(ratio - 1):.0%} "
                        f"{'slower' if ratio > 1 else 'faster'} than during calibration: part of the "
                        "error is the server's drift, not the model")
    return Validation(real, sim, joined, errors, summary_diff(real.summary, sim.summary), {"n": 0}, warnings,
                      profile, machine, adjusted, repeat, errors_repeat, spread_, stages_cmp,
                      diagnose(errors, spread_, stages_cmp) + decode_diagnosis(decode),
                      {"endpoint": {**context, "repeats": len(runs), "loop": first.mode},
                       "client_overhead": [r.client for r in runs], "decode_steps": decode})


def decode_steps(sim_scenario, runs: list[MeasuredRun]) -> list[dict]:
    """Each run's plain decode steps (read off its token times), measured against the
    profile's price for the same batch and context (``endpoint.decode_steps``): whether the
    decode is off by its shape or by the server's speed during the run."""
    from endpoint.decode_steps import compare_steps, decode_gaps
    from sim.pricing import make_cost_model

    if not any(r.itl is not None for r in runs):
        return []
    cost = make_cost_model(sim_scenario)
    return [compare_steps(cost, decode_gaps(r.requests, r.itl)) if r.itl is not None else {"n": 0} for r in runs]


def decode_diagnosis(decode: list[dict]) -> list[str]:
    runs = [(k + 1, d) for k, d in enumerate(decode) if d.get("n")]
    if not runs:
        return []
    k, d = runs[0]
    more = "".join(f"; run {j}: {r['rel_diff']:+.1%}" for j, r in runs[1:])
    first = "" if k == 1 else f"run {k}: "
    return [f"plain decode steps: {first}the profile prices {d['priced_mean_s'] * 1e3:.1f} ms for the measured batches "
            f"and contexts, measured {d['measured_mean_s'] * 1e3:.1f} ms ({d['rel_diff']:+.1%}{more})"]
