"""Calibrate against and validate on vLLM-CPU servers of other configurations: model shapes,
sequence limits, token budgets and KV caches small enough to preempt (issue 29).

    bash benchmarks/vllm_cpu/install.sh                      # once: vLLM's venv + SmolLM2
    .venv/bin/python benchmarks/server_configs_validation.py [--config NAME ...] [--commit]

For each configuration of ``CONFIGS``: assembles the model's folder (a random-weight shape from
``benchmarks/vllm_cpu/server_configs/<name>/config.json`` with SmolLM2's tokenizer, or SmolLM2
itself), starts vLLM with the configuration's flags, every process on one core (``taskset``,
one model thread), the load generator on the other; calibrates (``servesim calibrate
--endpoint``, nothing given but the URL and the model's config); then validates five workloads
sized from what calibration measured (the saturation rate), each measured twice:

- ``poisson-light`` and ``poisson-heavy``: Poisson at 30% and 90% of the measured saturation;
- ``long-prompts``: prompts of 60-90% of the context, a closed loop of 2 users;
- ``kv-pressure``: as many users as sequences, long outputs, about twice the KV cache
  (vLLM preempts; ``vllm:num_preemptions_total`` before and after each run);
- ``closed-loop``: half as many users as sequences.

Writes ``<out>/<name>/`` (summary.json with each workload as run, README.md, profile,
validations); ``--commit`` copies them to ``benchmarks/results/vllm-cpu-configs/<name>/`` and
rewrites that folder's README.md. ``--resimulate`` compares the committed measurements with the
current simulator, without a server.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.endpoint_validation import (  # noqa: E402
    TARGETS,
    calibrate_server,
    copy_results,
    load_avg,
    pin_client,
    resimulate_one,
    scenario,
    targets_met,
    validate_one,
)
from benchmarks.router_check import boost  # noqa: E402
from benchmarks.tiny_arch_validation import (  # noqa: E402
    error_line,
    first_request,
    kv_size,
    preemptions,
    run_preemptions,
    table,
)
from benchmarks.vllm_cpu import server as vllm  # noqa: E402
from benchmarks.vllm_cpu.tiny_models import assemble  # noqa: E402

SHAPES = REPO / "benchmarks" / "vllm_cpu" / "server_configs"
RESULTS = REPO / "benchmarks" / "results" / "vllm-cpu-configs"
MiB = 1024**2

# Each configuration: the model (a shape in SHAPES, served with random weights, or None:
# SmolLM2-135M's real weights), and the server's limits. KV caches: vLLM's tokens =
# bytes / (2 x layers x KV heads x head_dim x 2 bytes), in 128-token blocks.
CONFIGS = {
    # issue 29's configuration: a 360M-parameter Llama shape (SmolLM2-360M's), 8 sequences, a
    # 256-token budget, 2,432 tokens of KV (19 blocks: 40,960 bytes a token)
    "llama-360m": {"what": "Llama, 362 M parameters (SmolLM2-360M's shape), random weights",
                   "shape": "llama-360m", "max_model_len": 2048, "max_num_seqs": 8,
                   "max_num_batched_tokens": 256, "kv_bytes": 2432 * 40960},
    # SmolLM2-135M itself, fewer sequences, an odd budget and 45 blocks (23,040 bytes a token)
    "smollm2-135m-16seq": {"what": "SmolLM2-135M (real weights), 16 sequences, a 384-token budget",
                           "shape": None, "max_model_len": 2048, "max_num_seqs": 16,
                           "max_num_batched_tokens": 384, "kv_bytes": 128 * MiB},
    # a Qwen3 shape with a longer context, more sequences and a larger budget (20,480 bytes a token)
    "qwen3-160m": {"what": "Qwen3, 164 M parameters (QK-norm, GQA 12:4), random weights, a 4,096-token context",
                   "shape": "qwen3-160m", "max_model_len": 4096, "max_num_seqs": 24,
                   "max_num_batched_tokens": 1024, "kv_bytes": 8192 * 20480},
}
DTYPE = "bfloat16"


def server_flags(cfg: dict) -> list[str]:
    flags = ["--max-model-len", str(cfg["max_model_len"]), "--max-num-seqs", str(cfg["max_num_seqs"]),
             "--max-num-batched-tokens", str(cfg["max_num_batched_tokens"]), "--kv-cache-memory-bytes",
             str(cfg["kv_bytes"]), "--enforce-eager", "--dtype", DTYPE]
    return [*flags, "--load-format", "dummy"] if cfg["shape"] else flags


def workloads(cfg: dict, saturation_rps: float, quick: bool = False) -> dict[str, dict]:
    """The five workloads of a configuration, sized from its limits and the closed-loop rate
    calibration measured (256-token prompts, 64-token outputs)."""
    k = 0.5 if quick else 1.0
    L, S = cfg["max_model_len"], cfg["max_num_seqs"]

    def n(x):
        return max(6, int(x * k))

    def rate(f):
        return float(f"{f * saturation_rps:.2g}")

    synth = {"prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.6, "min": 16, "max": min(1500, L - 200)},
             "output_len": {"dist": "uniform", "min": 16, "max": 96}}
    return {
        "poisson-light": {"num_requests": n(20), "arrival": {"process": "poisson", "rate": rate(0.3)}, **synth},
        "poisson-heavy": {"num_requests": n(36), "arrival": {"process": "poisson", "rate": rate(0.9)}, **synth},
        "long-prompts": {"num_requests": n(12), "arrival": {"process": "closed", "concurrency": 2},
                         "prompt_len": {"dist": "uniform", "min": int(0.6 * L), "max": int(0.9 * L)},
                         "output_len": {"dist": "uniform", "min": 16, "max": 64}},
        "kv-pressure": {"num_requests": n(2 * S), "arrival": {"process": "closed", "concurrency": S},
                        "prompt_len": {"dist": "uniform", "min": 200, "max": 400},
                        "output_len": {"dist": "uniform", "min": 256, "max": 448}},
        "closed-loop": {"num_requests": n(4 * S), "arrival": {"process": "closed", "concurrency": max(2, S // 2)},
                        **synth},
    }


def model_dir(name: str, cfg: dict, models: Path, tokenizer: Path) -> Path:
    return assemble.assemble(cfg["shape"], models, tokenizer, SHAPES) if cfg["shape"] else vllm.MODEL


def hf_config(cfg: dict) -> Path:
    return SHAPES / cfg["shape"] / "config.json" if cfg["shape"] else vllm.MODEL / "config.json"


def start_server(name: str, cfg: dict, folder: Path, out: Path, args, summary: dict):
    flags = server_flags(cfg)
    log = out / "server.log"
    cmd = (f"VLLM_CPU_OMP_THREADS_BIND={args.server_cpu} VLLM_CPU_NUM_OF_RESERVED_CPU=0 OMP_NUM_THREADS=1 "
           f"taskset -c {args.server_cpu} vllm serve {folder} --served-model-name {name} {' '.join(flags)} "
           "--no-enable-prefix-caching")
    summary |= {"flags": flags, "server_command": cmd}
    srv = vllm.start(args.port, log, model=folder, name=name, args=flags, omp_cpus=[args.server_cpu],
                     taskset=[args.server_cpu], timeout_s=600, lifetime_s=3600)
    why = first_request(srv.url, name)
    if why:
        srv.stop()
        raise RuntimeError(error_line(log) or why)
    summary["server_start_s"] = srv.started_s
    return srv


def run_config(name: str, args) -> dict:
    from endpoint.records import write_json, write_text
    from endpoint.server_info import identity
    from sim.scenario.specs import model_from_hf_config

    cfg = CONFIGS[name]
    out = Path(args.out) / name
    out.mkdir(parents=True, exist_ok=True)
    hf = hf_config(cfg)
    summary: dict = {"config": name, "what": cfg["what"], "limits": {k: v for k, v in cfg.items() if k != "what"},
                     "params_sim": model_from_hf_config(hf).num_params, "dtype": DTYPE,
                     "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                     "load_before": [round(x, 2) for x in load_avg()], "workloads": [],
                     "command": f"python benchmarks/server_configs_validation.py --config {name}"
                                + (" --quick" if args.quick else "") + (" --commit" if args.commit else ""),
                     "notes": list(args.note or [])}
    folder = model_dir(name, cfg, Path(args.models), Path(args.tokenizer))
    with start_server(name, cfg, folder, out, args, summary) as srv:
        summary["server"] = identity(srv.url)
        summary["client_cpus"] = pin_client(args.client_cpu)
        summary["priority"] = {"server": boost(srv.proc.pid), "client": boost(0)}
        print(f"{name}: vLLM up in {srv.started_s:.0f} s; calibrating ...", flush=True)
        profile, fragment, cal = calibrate_server(srv.url, out, quick=False, served=name, hf_config=hf,
                                                  time_limit=args.calibration_limit)
        cal["mode"] = "full"
        summary["calibration"] = cal
        print(f"{name}: calibrated in {cal['seconds']:.0f} s: {cal['scheduler']}, {cal['kv_blocks']} blocks; "
              f"{cal['self_check']}", flush=True)
        todo = workloads(cfg, cal["saturation"]["measured_req_per_s"], args.quick)
        if args.only:
            todo = {k: v for k, v in todo.items() if k in args.only}
        for wname, w in todo.items():
            row = validate_one(wname, scenario(wname, fragment, w, out), profile, srv.url, out, args.repeats,
                               served=name, watch=lambda: {"preemptions": preemptions(srv.url)})
            row["measured_preemptions"] = run_preemptions(out / wname)
            row["spec"] = w
            summary["workloads"].append(row)
            print(f"{name} {wname}: E2E {row['e2e_error']:.1%} (spread {row['e2e_spread'] or 0:.1%}), "
                  f"TTFT {row['ttft_error']:.1%} (spread {row['ttft_spread'] or 0:.1%}), preemptions measured "
                  f"{row['measured_preemptions']}, simulated {row.get('sim_preemptions')}", flush=True)
            write_json(out / "summary.json", summary)
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    summary["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", config_readme(summary))
    if args.commit:
        commit(out, name, summary)
    return summary


def commit(out: Path, name: str, summary: dict) -> None:
    from endpoint.records import write_text

    copy_results(out, RESULTS / name, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml",
                                       "calibration.json"), [r["workload"] for r in summary["workloads"]])
    write_text(RESULTS / "README.md", index_readme(RESULTS))


def resimulate_config(name: str, args) -> dict:
    """No server: ``--out``'s measured runs of ``name`` compared again with the current simulator."""
    import yaml

    from endpoint.calibrate import kv_blocks_of
    from endpoint.records import write_json, write_text
    from sim.pricing.profile import load_profile
    from sim.scenario.specs import model_from_hf_config

    out = Path(args.out) / name
    summary = json.loads((out / "summary.json").read_text())
    profile = out / "profile.json"
    fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
    fragment["model"] = {"hf_config": str(hf_config(CONFIGS[name]))}  # this checkout's, wherever it ran
    grid = load_profile(profile).grid
    sched = grid["scheduler"]
    kv = kv_blocks_of(grid.get("cache_config", {}), model_from_hf_config(hf_config(CONFIGS[name])),
                      sched["block_size"], sched["max_num_seqs"])
    if kv and kv != fragment["hardware"]["kv_blocks"]:  # KV blocks as calibration reads them now
        cal = summary["calibration"]
        cal.setdefault("kv_blocks_run", cal["kv_blocks"])
        fragment["hardware"]["kv_blocks"] = cal["kv_blocks"] = kv
        write_text(profile.with_suffix(".scenario.yaml"), yaml.safe_dump(fragment, sort_keys=False))
    fragment["cost"]["profile"] = str(profile.resolve())
    if not args.keep_saturation:  # calibration's own check, simulated again with the current simulator
        from endpoint.calibrate import disagreement, simulate_saturation

        cal = summary["calibration"]
        cal.setdefault("saturation_run", dict(cal["saturation"]))  # as the run itself simulated it, kept once
        cal["saturation"] = {**cal["saturation"], **simulate_saturation(profile, fragment, cal["saturation"], out)}
        cal["self_check"] = disagreement(cal["saturation"]) or "within 5%"
    rows = []
    for r in summary["workloads"]:
        row = resimulate_one(r["workload"], scenario(r["workload"], fragment, r["spec"], out), profile, out)
        row |= {"measured_preemptions": r["measured_preemptions"], "spec": r["spec"]}
        rows.append(row)
        print(f"{name} {row['workload']}: E2E {row['e2e_error']:.1%}, TTFT {row['ttft_error']:.1%}", flush=True)
    summary["workloads"] = rows
    summary["resimulated"] = True
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", config_readme(summary))
    if args.commit:
        commit(out, name, summary)
    return summary


def workload_line(r: dict) -> str:
    s = r["spec"]
    a = s["arrival"]
    arr = f"Poisson {a['rate']} req/s" if a["process"] == "poisson" else f"closed loop of {a['concurrency']}"
    p, o = s["prompt_len"], s["output_len"]
    lens = (f"prompts lognormal mean {p['mean']} ({p['min']}-{p['max']})" if p["dist"] == "lognormal"
            else f"prompts {p['min']}-{p['max']}")
    return f"- {r['workload']}: {s['num_requests']} requests, {arr}, {lens}, outputs {o['min']}-{o['max']}"


def config_readme(summary: dict) -> str:
    lim = summary["limits"]
    cal = summary.get("calibration", {})
    sat = cal.get("saturation") or {}
    lines = [f"# servesim against vLLM-CPU: {summary['config']}", "",
             f"{summary['what']} ({summary['params_sim'] / 1e6:.0f} M parameters as servesim reads it). Written by "
             "`benchmarks/server_configs_validation.py`:", "", "```bash", summary["command"], "```", "",
             f"- vLLM: `{summary['server_command']}`",
             f"- limits: context {lim['max_model_len']}, {lim['max_num_seqs']} sequences, a "
             f"{lim['max_num_batched_tokens']}-token budget; KV cache {kv_size(summary)}",
             f"- run {summary['started_utc']} – {summary.get('finished_utc', '?')} UTC; machine load average "
             f"(1/5/15 min) before {summary['load_before']}, after {summary.get('load_after')} (2 cores); "
             f"server start {summary.get('server_start_s', float('nan')):.0f} s; load generator on CPU "
             f"{summary.get('client_cpus')}; niceness (server, client) {summary.get('priority')}"]
    if cal:
        lines += [f"- calibration: {cal['seconds']:.0f} s; inferred scheduler {cal['scheduler']}, "
                  f"{cal['kv_blocks']} KV blocks"
                  + (f" (vLLM's less its null block; the run simulated {cal['kv_blocks_run']})"
                     if cal.get("kv_blocks_run") else "")
                  + f"; per-request overhead {cal['request_overhead_s'] * 1e3:.1f} ms; "
                  f"fit median error {cal['fit']['median_abs_rel_error']:.1%}; saturation measured "
                  f"{sat.get('measured_req_per_s', float('nan')):.2f} req/s, simulated "
                  f"{sat.get('simulated_req_per_s', float('nan')):.2f}"
                  + (f" (the run's simulator: {cal['saturation_run']['simulated_req_per_s']:.2f})"
                     if cal.get("saturation_run") else "") + f"; self-check: {cal.get('self_check')}",
                  *(f"- calibration note: {n}" for n in cal.get("notes", []))]
    lines += [f"- {n}" for n in summary.get("notes", [])]
    lines += ["", "Workloads (rates from the saturation calibration measured):", "",
              *(workload_line(r) for r in summary["workloads"]), "",
              f"Targets: median per-request E2E error ≤ {TARGETS['e2e']:.0%} and TTFT ≤ {TARGETS['ttft']:.0%}, "
              "or no larger than the two measured runs' own difference (*spread*). Error: simulation against the "
              "first measured run. Preemptions measured: vLLM's `vllm:num_preemptions_total` after minus before "
              "each run. *speed*: the speed probe before and after the runs against calibration's (+ is slower); "
              "*E2E adj.*: E2E error with the simulation slowed by that drift.", "", *table(summary)]
    return "\n".join(lines) + "\n"


NOTES = "NOTES.md"


def index_readme(root: Path) -> str:
    lines = ["# servesim against vLLM-CPU servers of other configurations", "",
             "Each configuration served by vLLM-CPU on one core of a 2-core machine, calibrated with `servesim "
             "calibrate --endpoint` (nothing given but the URL and the model's config) and validated on five "
             "workloads sized from what calibration measured (`benchmarks/server_configs_validation.py`; one "
             "folder per configuration with its README, flags and measured runs). The configuration of "
             "`benchmarks/results/vllm-cpu/` (SmolLM2-135M, 32 sequences, 512-token budget) is the fourth; "
             "llama.cpp's server is in `benchmarks/results/llama-cpp/`. "
             "`tests/endpoint/test_server_configs_results.py` checks these tables against the files.", "",
             f"Targets: median per-request E2E error ≤ {TARGETS['e2e']:.0%} and TTFT ≤ {TARGETS['ttft']:.0%}, or "
             "within the two measured runs' own difference.", ""]
    if (root / NOTES).is_file():
        lines += [(root / NOTES).read_text().rstrip(), ""]
    met = []
    for f in sorted(root.glob("*/summary.json")):
        s = json.loads(f.read_text())
        cal = s.get("calibration", {})
        ok = [targets_met(r) for r in s["workloads"]]
        met.append((s["config"], sum(e for e, _ in ok), sum(t for _, t in ok), len(ok)))
        lim = s["limits"]
        lines += [f"## {s['config']}: {s['what']}", "",
                  f"Context {lim['max_model_len']}, {lim['max_num_seqs']} sequences, budget "
                  f"{lim['max_num_batched_tokens']}; KV cache {kv_size(s)}; calibration "
                  f"{cal.get('seconds', float('nan')):.0f} s inferred {cal.get('scheduler')}, "
                  f"{cal.get('kv_blocks')} blocks; run {s['started_utc']} UTC, load average before "
                  f"{s['load_before']} after {s.get('load_after')}.", "", *table(s), "",
                  *(f"- {n}" for n in s.get("notes", [])), ""]
    if met:
        lines += ["## Targets met", "", "| configuration | E2E met | TTFT met |", "|---|---|---|",
                  *(f"| {c} | {e} of {n} | {t} of {n} |" for c, e, t, n in met), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--out", default=str(REPO / "results" / "server-configs-validation"))
    p.add_argument("--models", default="/work/vllm/configs", help="where the random-weight models' folders go")
    p.add_argument("--tokenizer", default=str(vllm.MODEL), help="SmolLM2's folder (its tokenizer files)")
    p.add_argument("--port", type=int, default=8051)
    p.add_argument("--server-cpu", type=int, default=1, help="the core vLLM runs on (all its processes)")
    p.add_argument("--client-cpu", type=int, default=0, help="the core the load generator runs on")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="fewer requests per workload")
    p.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all five)")
    p.add_argument("--calibration-limit", type=float, default=600.0, help="seconds for calibration at most")
    p.add_argument("--note", action="append", help="a line for the results' README (repeatable)")
    p.add_argument("--resimulate", action="store_true",
                   help="no server: compare --out's measured runs again with the current simulator")
    p.add_argument("--keep-saturation", action="store_true",
                   help="with --resimulate: keep calibration's saturation check as the run simulated it")
    p.add_argument("--readme-only", action="store_true", help="rewrite the README files from the summaries")
    p.add_argument("--commit", action="store_true", help="copy the results to benchmarks/results/vllm-cpu-configs/")
    args = p.parse_args(argv)
    from endpoint.records import write_text

    if args.readme_only:
        for f in sorted(RESULTS.glob("*/summary.json")):
            write_text(f.parent / "README.md", config_readme(json.loads(f.read_text())))
        write_text(RESULTS / "README.md", index_readme(RESULTS))
        return 0
    if args.resimulate:
        for name in args.config:
            if (Path(args.out) / name / "profile.json").is_file():
                resimulate_config(name, args)
        return 0
    return vllm.serve_each(args.config, lambda name: run_config(name, args), "configuration")


if __name__ == "__main__":
    sys.exit(main())
