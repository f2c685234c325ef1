"""Calibrate against llama.cpp's own server (``llama-server``: fixed slots, each with its own
context), then validate workloads it was not calibrated on, each measured twice.

    bash benchmarks/llama_cpp/install.sh             # once: llama-server built from the package index
    .venv/bin/python benchmarks/llama_cpp_validation.py [--quick] [--commit]

Starts llama-server on 127.0.0.1 (SmolLM2-135M Q4_1, ``--slots`` slots of ``--slot-context``
tokens, one thread, pinned to ``--server-cpu``), records what it publishes about itself
(``tests/endpoint/data/server_answers/llama-server.json``, for the tests of
``endpoint/server_info.py``), runs ``servesim calibrate --endpoint``'s calibration, validates a
light and a heavy Poisson workload (the heavy one queues for the slots), a closed loop of
more users than slots, prompts of most of a slot's context, and long outputs from more users
than slots, and writes one folder per workload plus ``summary.json`` and
``README.md`` (``--commit``: into ``benchmarks/results/llama-cpp/``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.endpoint_validation import (  # noqa: E402
    calibrate_server,
    copy_results,
    load_avg,
    pin_client,
    row_of,
    scenario,
    targets_met,
    what_is_off,
)
from benchmarks.llama_cpp import server as llama  # noqa: E402
from benchmarks.router_check import boost  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "llama-cpp"
TOKENIZER = Path("/work/vllm/smollm2-135m")  # SmolLM2's tokenizer.json (bash benchmarks/vllm_cpu/install.sh)
SIM_MODEL = "smollm2-135m"  # the catalog's SmolLM2-135M: the GGUF's shape
SYNTH = {"prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.6, "min": 16, "max": 800},
         "output_len": {"dist": "uniform", "min": 16, "max": 96}}


def workloads(quick: bool) -> dict[str, dict]:
    k = 0.34 if quick else 1.0

    def n(x):
        return max(6, int(x * k))

    return {
        "poisson-light": {"num_requests": n(30), "arrival": {"process": "poisson", "rate": 0.5}, **SYNTH},
        "poisson-heavy": {"num_requests": n(40), "arrival": {"process": "poisson", "rate": 3.0}, **SYNTH},
        "closed-loop": {"num_requests": n(32), "arrival": {"process": "closed", "concurrency": 8}, **SYNTH},
        # prompts of 60-90% of a slot's context: prefill in n_batch chunks dominates
        "long-prompts": {"num_requests": n(20), "arrival": {"process": "poisson", "rate": 0.6},
                         "prompt_len": {"dist": "uniform", "min": 600, "max": 900},
                         "output_len": {"dist": "uniform", "min": 16, "max": 64}},
        # long outputs, more users than slots: each slot holds its request's whole context while
        # it decodes (fixed slots never preempt; the others wait for a slot)
        "long-outputs": {"num_requests": n(16), "arrival": {"process": "closed", "concurrency": 6},
                         "prompt_len": {"dist": "uniform", "min": 64, "max": 256},
                         "output_len": {"dist": "uniform", "min": 256, "max": 512}},
    }


def record_answers(url: str, slots: int, slot_context: int, batch: int) -> None:
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "record_server_answers.py"), url,
                    "--name", "llama-server", "--fact", f"parallel={slots}",
                    "--fact", f"ctx_size={slots * slot_context}", "--fact", f"batch_size={batch}"], check=True)


def validate_workload(name: str, sc, profile: Path, url: str, out: Path, repeats: int) -> dict:
    from endpoint.validate import validate

    v = validate(sc, profile, url, llama.NAME, source=name, tokenizer=str(TOKENIZER), repeats=repeats,
                 out=out / name, log=None)
    return row_of(name, v, out)


def pct(x) -> str:
    return "–" if x is None else f"{x:.1%}"


def readme(summary: dict) -> str:
    cal = summary.get("calibration", {})
    sat = cal.get("saturation", {})
    lines = [
        "# servesim against llama.cpp's server (SmolLM2-135M Q4_1)", "",
        "Written by `benchmarks/llama_cpp_validation.py` from one run on a shared 2-core machine. To reproduce:", "",
        "```bash", "bash benchmarks/llama_cpp/install.sh", "bash benchmarks/vllm_cpu/install.sh   # SmolLM2's "
        "tokenizer.json", f".venv/bin/python {summary['command'].removeprefix('python ')}", "```", "",
        "Targets (issue #29): median per-request E2E error ≤ 5% and TTFT ≤ 10%, or no larger than the two "
        "measured runs' own difference.", "",
        f"- server: `{' '.join(summary.get('server_command', []))}`; started in "
        f"{summary.get('server_start_s', float('nan')):.1f} s; it published: "
        + "; ".join(f"{k} {v}" for k, v in summary.get("published", {}).items()),
        f"- calibration: {cal.get('seconds', float('nan')):.0f} s; scheduler {cal.get('scheduler')}; per-request "
        f"overhead {cal.get('request_overhead_s', float('nan')) * 1e3:.1f} ms; saturation measured "
        f"{sat.get('measured_req_per_s', float('nan')):.2f} req/s, simulated "
        f"{sat.get('simulated_req_per_s', float('nan')):.2f} "
        f"({sat.get('rel_diff', float('nan')):+.1%}); self-check: {cal.get('self_check')}",
        f"- machine load average (1/5/15 min) before {summary.get('load_before')}, after {summary.get('load_after')}; "
        f"{summary.get('started_utc')}–{summary.get('finished_utc')} UTC",
        "", "| workload | n | E2E err | E2E spread | TTFT err | TTFT spread | TPOT err | E2E target | TTFT target "
        "| what is off |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary.get("workloads", []):
        e2e, ttft = targets_met(r)
        lines.append(f"| {r['workload']} | {r['requests']} | {pct(r.get('e2e_error'))} | {pct(r.get('e2e_spread'))} "
                     f"| {pct(r.get('ttft_error'))} | {pct(r.get('ttft_spread'))} | {pct(r.get('tpot_error'))} "
                     f"| {'met' if e2e else 'missed'} | {'met' if ttft else 'missed'} | {what_is_off(r)} |")
    lines += ["", *[f"- {n}" for n in summary.get("notes", [])]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from endpoint.records import write_json, write_text
    from endpoint.server_info import read

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/llama-cpp-validation")
    ap.add_argument("--quick", action="store_true", help="fewer requests per workload")
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--slot-context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=512, help="n_batch (and n_ubatch)")
    ap.add_argument("--port", type=int, default=8093)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--calibration-limit", type=float, default=900.0)
    ap.add_argument("--record-answers", action="store_true", help="also write the test fixture of /props etc.")
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args(argv)
    why = llama.installed()
    if why:
        print(f"llama.cpp not installed: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/llama_cpp_validation.py" + "".join(
        f" {a}" for a, on in (("--quick", args.quick), ("--quick-calibration", args.quick_calibration),
                              ("--commit", args.commit)) if on)
    summary: dict = {"command": cmd, "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                     "load_before": [round(x, 2) for x in load_avg()], "workloads": [], "notes": list(args.note)}
    flags = [*llama.flags(args.slots, args.slot_context, args.batch), "-ub", str(args.batch)]
    with llama.start(args.port, out / "server.log", flags, taskset=[args.server_cpu]) as srv:
        summary |= {"server_command": [Path(srv.command[0]).name if "/" in srv.command[0] else srv.command[0],
                                       *srv.command[1:]], "server_start_s": srv.started_s}
        info = read(srv.url)
        summary["server"] = info.as_dict()
        summary["published"] = {k: f"{getattr(info, k)} ({info.sources[k]})" for k in
                                ("context_per_seq", "max_seqs", "kv_tokens", "kv_layout", "version")
                                if getattr(info, k) is not None}
        if args.record_answers:
            record_answers(srv.url, args.slots, args.slot_context, args.batch)
        summary["client_cpus"] = pin_client(args.client_cpu)
        summary["priority"] = {"server": boost(srv.proc.pid), "client": boost(0)}
        print(f"llama-server up in {srv.started_s:.1f} s; calibrating ...", flush=True)
        profile, fragment, cal = calibrate_server(srv.url, out, args.quick_calibration, served=llama.NAME,
                                                  time_limit=args.calibration_limit, tokenizer=str(TOKENIZER),
                                                  sim_model=SIM_MODEL)
        summary["calibration"] = cal
        print(f"calibrated in {cal['seconds']:.0f} s: {cal['scheduler']}; {cal['self_check']}", flush=True)
        for name, w in workloads(args.quick).items():
            row = validate_workload(name, scenario(name, fragment, w, out), profile, srv.url, out, args.repeats)
            summary["workloads"].append(row)
            print(f"{name}: E2E {row['e2e_error']:.1%} (spread {row['e2e_spread'] or 0:.1%}), "
                  f"TTFT {row['ttft_error']:.1%} (spread {row['ttft_spread'] or 0:.1%})", flush=True)
            write_json(out / "summary.json", summary)
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    summary["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", readme(summary))
    if args.commit:
        copy_results(out, RESULTS, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml",
                                    "calibration.json"), [r["workload"] for r in summary["workloads"]])
    print(json.dumps({r["workload"]: [round(r["e2e_error"], 4), round(r["ttft_error"], 4)]
                      for r in summary["workloads"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
