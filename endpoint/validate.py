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
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.compare import breakdown, diagnose, error_stats, join, spread, summary_diff
from calibration.validate import Validation, stage_means
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


def measured_result(scenario, result, plan, requests: pd.DataFrame) -> RunResult:
    steps = pd.DataFrame({"duration": [], "num_seqs": []})
    return RunResult(scenario, requests, steps, summarize(requests, steps), [], result.duration_s,
                     f"measured ({result.mode} loop)")


def validate(scenario, profile_path: str | Path, url: str, model: str, *, source: str, tokenizer: str | None,
             api: str = "completions", exact: bool = True, repeats: int = 1, out: Path | None = None,
             log=print, progress: bool = True) -> Validation:
    from endpoint.calibrate import speed_probe
    from endpoint.cli import measure
    from endpoint.loadgen import Options
    from endpoint.probes import Prober
    from endpoint.prompts import PromptBuilder
    from endpoint.records import itl_frame, requests_frame, write_run
    from endpoint.replay import load_vocab
    from endpoint.simulate import scaled_profile, simulate_measured, with_profile

    profile = load_profile(profile_path, "--profile")
    sim_sc = with_profile(scenario, profile_path, source)
    from sim.pricing import make_cost_model

    make_cost_model(sim_sc)  # model shape and TP match the profile? (fails fast, exit 2)
    warnings = []
    if profile.source != "endpoint":
        warnings.append(f"profile from {profile.source!r}, not from an endpoint calibration")
    inferred = profile.grid.get("scheduler", {})
    for k in ("max_num_seqs", "chunk_size", "block_size"):
        if k in inferred and getattr(scenario.scheduler, k) != inferred[k]:
            warnings.append(f"scenario scheduler.{k} = {getattr(scenario.scheduler, k)}, calibration "
                            f"inferred {inferred[k]}")
    vocab = load_vocab(url, tokenizer)
    prober = Prober(Options(url=url, model=model), PromptBuilder(vocab, 16, 99), metrics=False)
    before = speed_probe(prober)
    runs = []
    for k in range(repeats):
        m0 = scrape(url)
        plan, res = measure(scenario, url, model, tokenizer=tokenizer, api=api, exact=exact, source=source,
                            progress=progress, label=f"{scenario.name} run {k + 1}/{repeats}")
        stages = server_stages(m0, scrape(url))
        req = requests_frame(res, scenario.slo, plan.workload.class_names, plan.workload.class_id)
        itl = itl_frame(res)
        if out is not None:
            write_run(out / f"run{k + 1}", res, req, itl, {"scenario": scenario.name, "endpoint": url,
                                                           "model": model, "server_stages": stages})
        runs.append((plan, res, req, stages))
    after = speed_probe(prober)
    calibrated = profile.grid.get("probe_s")
    machine = {"probe_before_s": before["probe_s"], "probe_after_s": after["probe_s"]}
    if calibrated:
        machine["probe_calibration_s"] = float(calibrated)
        machine["speed_ratio"] = (before["probe_s"] + after["probe_s"]) / 2 / float(calibrated)

    plan, res, req, stages = runs[0]
    real = measured_result(scenario, res, plan, req)
    ok = (req["status"] == "finished").to_numpy()
    if not ok.all():
        warnings.append(f"{int((~ok).sum())} request(s) failed on the server: "
                        + "; ".join(sorted({e for e in req['error'] if e})[:3]))
    sends = req["arrival"].to_numpy()
    prompt = req["prompt_tokens"].to_numpy()
    output = np.where(ok, req["output_tokens"].to_numpy(), req["max_output_tokens"].to_numpy())
    if log:
        log("simulating the same requests with the profile ...")
    sim = simulate_measured(sim_sc, plan.workload, sends, prompt, output, closed=plan.closed,
                            think_s=plan.think_time_s, profile=profile)
    joined = join(real.requests, sim.requests)
    adjusted = {}
    if "speed_ratio" in machine:
        with tempfile.TemporaryDirectory() as tmp:
            scaled = scaled_profile(profile, machine["speed_ratio"], Path(tmp) / "scaled.json")
            again = simulate_measured(with_profile(scenario, scaled, source), plan.workload, sends, prompt,
                                      output, closed=plan.closed, think_s=plan.think_time_s,
                                      profile=load_profile(scaled))
        adjusted = error_stats(join(real.requests, again.requests))
    repeat = errors_repeat = spread_ = None
    if len(runs) > 1:
        p2, r2, req2, _ = runs[1]
        repeat = measured_result(scenario, r2, p2, req2)
        spread_ = spread(real.requests, repeat.requests)
        errors_repeat = error_stats(join(repeat.requests, sim.requests))
    # vLLM times queue, prefill (scheduled → first token) and decode in the engine; what the
    # client saw beyond them is waiting too (the API process, the hand-over between steps)
    fin = req[ok]
    real_stages = {"e2e_s": float(fin["e2e"].mean())}
    if {"prefill_s", "decode_s"} <= stages.keys():
        real_stages |= {"prefill_s": stages["prefill_s"], "decode_s": stages["decode_s"],
                        "wait_s": real_stages["e2e_s"] - stages["prefill_s"] - stages["decode_s"]}
    sim_stages = stage_means(sim.requests)
    stages_cmp = breakdown(real_stages, sim_stages)
    errors = error_stats(joined)
    warnings += [f"simulation: {w}" for w in sim.warnings]
    ratio = machine.get("speed_ratio", 1.0)
    if abs(ratio - 1) > 0.1:
        warnings.append(f"the server ran the speed probe {abs(ratio - 1):.0%} "
                        f"{'slower' if ratio > 1 else 'faster'} than during calibration: part of the "
                        "error is the server's drift, not the model")
    v = Validation(real, sim, joined, errors, summary_diff(real.summary, sim.summary), {"n": 0}, warnings,
                   profile, machine, adjusted, repeat, errors_repeat or {}, spread_ or {}, stages_cmp,
                   diagnose(errors, spread_ or {}, stages_cmp),
                   {"endpoint": {"url": url, "model": model, "api": api, "repeats": repeats,
                                 "loop": res.mode, "speed_probe": {"before": before, "after": after}},
                    "client_overhead": [r[1].client for r in runs]})
    return v
