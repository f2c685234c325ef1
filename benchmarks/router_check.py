"""Two vLLM-CPU servers (one core each) behind a real router from the package index
(``vllm-router``): servesim's round-robin and prefix-affinity routers against the router's
``round_robin`` and ``cache_aware`` on a shared-prefix workload (issue 31, part 5).

    bash benchmarks/vllm_cpu/install.sh              # once: vLLM's venv + the converted model
    bash benchmarks/vllm_cpu/install_router.sh       # once: vllm-router in its own venv
    .venv/bin/python benchmarks/router_check.py [--out DIR] [--commit]
    .venv/bin/python benchmarks/router_check.py --resimulate --out benchmarks/results/router-check

Starts server A pinned to CPU 0 and server B to CPU 1 (model threads and API process on that
core, prefix caching on), then for each policy empties both prefix caches, starts the router
in front of them and runs ``endpoint.validate`` through it: the same shared-prefix requests
measured twice (the second run with other words, so that neither cache keeps the first's
prefixes), each server's finished-request counter (``vllm:request_success_total`` on its own
``/metrics``) read before and after each run, and the first run's requests simulated on two
replicas with the servesim router closest to the real one. The profile is the committed
vLLM-CPU calibration (``benchmarks/results/vllm-cpu/profile.json``: the same server flags, its
model threads on one core), unless ``--profile`` names another.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.endpoint_validation import TARGETS, copy_results, load_avg, row_of  # noqa: E402
from benchmarks.endpoint_validation import scenario as bench_scenario  # noqa: E402
from benchmarks.vllm_cpu import server as vllm  # noqa: E402

ROUTER_VENV = Path(os.environ.get("VLLM_ROUTER_VENV", "/work/vllm-router-venv"))
ROUTER_VERSION = "0.1.17"
COMMITTED = REPO / "benchmarks" / "results" / "router-check"
PROFILE = REPO / "benchmarks" / "results" / "vllm-cpu" / "profile.json"
SHARE_TARGET = 0.05  # per-replica share of requests, within 5 points of the measured one
FINISHED = ("vllm:request_success_total",)
NICE = -10  # servers, router and load generator ahead of other work on a shared machine
# cache_aware's three thresholds given explicitly (these are its defaults): route to the worker
# whose radix tree matches more than 30% of the prompt's characters, else to the worker with
# the smallest tree; the least loaded one once loads differ by more than 64 and 1.5x.
POLICIES = {
    "round-robin": {"router": ["--policy", "round_robin"], "sim": {"policy": "round-robin"}},
    "cache-aware": {"router": ["--policy", "cache_aware", "--cache-threshold", "0.3",
                               "--balance-abs-threshold", "64", "--balance-rel-threshold", "1.5"],
                    "sim": {"policy": "prefix-affinity", "balance_abs": 64, "no_match": "smallest-record"}},
}
# Four 512-token system prompts, each request's own 32-256 tokens after one of them.
WORKLOAD = {"num_requests": 40, "arrival": {"process": "poisson", "rate": 1.2},
            "shared_prefix": {"num_prompts": 4, "length": 512},
            "prompt_len": {"dist": "uniform", "min": 32, "max": 256},
            "output_len": {"dist": "uniform", "min": 16, "max": 96}}


def router_installed() -> str | None:
    if not (ROUTER_VENV / "bin" / "vllm-router").is_file():
        return f"no vllm-router in {ROUTER_VENV} (bash benchmarks/vllm_cpu/install_router.sh)"
    return None


@contextlib.contextmanager
def router(policy: str, workers: list[str], port: int, log: Path, lifetime_s: int, timeout_s: float = 60):
    """The router in front of ``workers`` (its own session; ``timeout`` ends it after
    ``lifetime_s`` whatever happens here); yields its URL once ``/v1/models`` answers."""
    cmd = ["timeout", "-k", "5", str(lifetime_s), str(ROUTER_VENV / "bin" / "vllm-router"),
           "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers, *POLICIES[policy]["router"],
           "--log-level", "info"]
    f = open(log, "w")  # noqa: SIM115 (the router's lifetime)
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    boost(proc.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.perf_counter()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm-router exited with code {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"vllm-router did not answer within {timeout_s:.0f} s; see {log}") from None
                time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        f.close()


def boost(pid: int, niceness: int = NICE) -> int | None:
    """Run ``pid``'s process group (a server or the router with all their processes; 0: this
    process) at ``niceness``, ahead of whatever else shares the machine. With the kernel's
    autogroups on, niceness counts only within a session, so the session's autogroup gets it
    too. Returns the niceness it got (None: not allowed, e.g. not root)."""
    which, who = (os.PRIO_PROCESS, 0) if pid == 0 else (os.PRIO_PGRP, pid)
    try:
        os.setpriority(which, who, niceness)
        group = Path(f"/proc/{pid or os.getpid()}/autogroup")
        if group.is_file():
            group.write_text(str(niceness))
        return os.getpriority(which, who)
    except OSError:
        return None


def finished_counts(urls: list[str]) -> dict[str, float | None]:
    """Each server's finished requests so far (None where its /metrics did not answer)."""
    from endpoint.server_metrics import scrape

    out = {}
    for u in urls:
        m = scrape(u)
        out[u] = None if m is None else m.value(FINISHED)
    return out


def reset_prefix_cache(url: str) -> None:
    """Empty a server's prefix cache (vLLM's dev-mode ``POST /reset_prefix_cache``)."""
    req = urllib.request.Request(url + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}/reset_prefix_cache answered {r.status}")


def served(watch: dict, workers: list[str]) -> list[int]:
    """Requests each worker finished during a run, from the counters ``watch`` kept before
    and after it (``validate``'s run summary); refused when a counter is missing or fell."""
    before, after = watch.get("before") or {}, watch.get("after") or {}
    out = []
    for u in workers:
        b, a = before.get(u), after.get(u)
        if b is None or a is None:
            raise ValueError(f"no finished-request counter for {u} (before {b}, after {a})")
        if a < b or a != int(a) or b != int(b):
            raise ValueError(f"{u}: finished-request counter went from {b} to {a}")
        out.append(int(a - b))
    return out


def shares(counts: list[int]) -> list[float]:
    total = sum(counts)
    if total == 0:
        raise ValueError("no request was served")
    return [c / total for c in counts]


def split_error(sim: list[float], real: list[float]) -> float:
    """Largest difference between the simulated and measured shares, replicas matched by
    rank (the busier simulated replica against the busier server): the two servers are the
    same, so which one a router fills first is a label, not a result."""
    return max(abs(s - r) for s, r in zip(sorted(sim), sorted(real), strict=True))


def policy_scenario(policy: str, fragment: dict, base: Path):
    frag = {**fragment, "replicas": 2, "router": POLICIES[policy]["sim"]}
    return bench_scenario(f"router-{policy}", frag, WORKLOAD, base, prefix_caching=True)


def share_row(out: Path, policy: str, workers: list[str], v) -> dict:
    """The measured runs' and the simulation's split of requests between the two replicas."""
    real = []
    k = 1
    while (out / policy / f"run{k}" / "summary.json").is_file():
        meta = json.loads((out / policy / f"run{k}" / "summary.json").read_text())
        real.append(served(meta["watch"], workers))
        k += 1
    sim_replica = v.sim.requests["replica"].to_numpy()
    sim = [int((sim_replica == r).sum()) for r in range(len(workers))]
    row = {"workers": workers, "served_real": real, "served_sim": sim,
           "share_real": [shares(c) for c in real], "share_sim": shares(sim)}
    row["share_error"] = split_error(row["share_sim"], row["share_real"][0])
    row["share_error_vs_run2"] = split_error(row["share_sim"], row["share_real"][1]) if len(real) > 1 else None
    row["share_spread"] = split_error(row["share_real"][0], row["share_real"][1]) if len(real) > 1 else None
    return row


def met(row: dict) -> dict[str, bool]:
    """The issue's targets: median per-request E2E within 5% (or the two runs' spread), each
    replica's share within 5 points of the measured one."""
    return {"e2e": row["e2e_error"] <= max(TARGETS["e2e"], row["e2e_spread"] or 0),
            "share": row["share_error"] <= SHARE_TARGET}


def run_policy(policy: str, fragment: dict, profile: Path, workers: list[str], out: Path, port: int,
               repeats: int) -> dict:
    from endpoint.validate import validate

    for u in workers:
        reset_prefix_cache(u)
    sc = policy_scenario(policy, fragment, out)
    with router(policy, workers, port, out / f"router-{policy}.log", lifetime_s=1800) as url:
        v = validate(sc, profile, url, vllm.NAME, source=policy, tokenizer=str(vllm.MODEL), repeats=repeats,
                     out=out / policy, log=None, watch=lambda: finished_counts(workers))
    return {**row_of(policy, v, out), **share_row(out, policy, workers, v)}


def resimulate_policy(policy: str, fragment: dict, profile: Path, out: Path, workers: list[str]) -> dict:
    from endpoint.validate import compare, read_runs

    old = json.loads((out / policy / "validation.json").read_text())
    context = {k: v for k, v in old["endpoint"].items() if k not in ("repeats", "loop")}
    v = compare(policy_scenario(policy, fragment, out), profile, read_runs(out / policy), context,
                source=policy, log=None)
    return {**row_of(policy, v, out), **share_row(out, policy, workers, v)}


def load_fragment(profile: Path) -> dict:
    fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
    fragment["cost"]["profile"] = str(profile.resolve())
    return fragment


def print_row(r: dict) -> None:
    print(f"{r['workload']}: E2E {r['e2e_error']:.1%} (spread {r['e2e_spread'] or 0:.1%}), TTFT "
          f"{r['ttft_error']:.1%} (spread {r['ttft_spread'] or 0:.1%}); served real {r['served_real']} sim "
          f"{r['served_sim']}: split error {r['share_error']:.1%} (spread {r['share_spread'] or 0:.1%})",
          flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "results" / "router-check"))
    p.add_argument("--port", type=int, default=8021, help="server A's port; B on the next, the router two above")
    p.add_argument("--policies", nargs="*", default=list(POLICIES), choices=list(POLICIES))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--profile", default=str(PROFILE), help="the endpoint profile (its .scenario.yaml beside it)")
    p.add_argument("--calibrate", action="store_true",
                   help="calibrate server A first (servesim calibrate --endpoint, quick) instead of --profile")
    p.add_argument("--dtype", default=None,
                   help="the servers' --dtype (default: benchmarks/vllm_cpu/server.py's bfloat16; a CPU without "
                        "AVX-512 has no fast bfloat16 matmul)")
    p.add_argument("--resimulate", action="store_true",
                   help="no server: compare --out's measured runs again with the current simulator")
    p.add_argument("--readme-only", action="store_true", help="rewrite README.md from --out's summary.json")
    p.add_argument("--commit", action="store_true", help="copy the results to benchmarks/results/router-check/")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.readme_only or args.resimulate:
        summary = json.loads((out / "summary.json").read_text())
        if args.resimulate:
            profile = out / "profile.json"
            fragment = load_fragment(profile)
            summary["policies"] = [resimulate_policy(r["workload"], fragment, profile, out, r["workers"])
                                   for r in summary["policies"]]
            summary["resimulated"] = True
            summary["sim_router"] = {r["workload"]: POLICIES[r["workload"]]["sim"] for r in summary["policies"]}
            for r in summary["policies"]:
                print_row(r)
        finish(out, summary, args.commit)
        return 0
    why = vllm.installed() or router_installed()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    profile = out / "profile.json"
    if not args.calibrate:
        shutil.copy2(args.profile, profile)
        shutil.copy2(Path(args.profile).with_suffix(".scenario.yaml"), profile.with_suffix(".scenario.yaml"))
    summary: dict = {"load_before": [round(x, 2) for x in load_avg()], "policies": [],
                     "router": {"package": "vllm-router", "version": router_version(),
                                "flags": {k: v["router"] for k, v in POLICIES.items()}},
                     "sim_router": {k: v["sim"] for k, v in POLICIES.items()}, "workload": WORKLOAD,
                     "profile_from": "calibrated on server A" if args.calibrate
                     else str(Path(args.profile).resolve().relative_to(REPO))
                     if Path(args.profile).resolve().is_relative_to(REPO) else str(args.profile),
                     "dtype": args.dtype or "bfloat16",
                     "command_args": (f"--dtype {args.dtype} " if args.dtype else "")
                     + ("--calibrate " if args.calibrate else ""),
                     "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    summary["priority"] = [boost(0)]  # the load generator
    t0 = time.perf_counter()
    dev = {"VLLM_SERVER_DEV_MODE": "1"}  # for /reset_prefix_cache
    with contextlib.ExitStack() as stack:
        workers = []
        for i, cpu in enumerate((0, 1)):
            srv = stack.enter_context(vllm.start(args.port + i, out / f"server-{'ab'[i]}.log", prefix_caching=True,
                                                 omp_cpus=[cpu], env=dev, lifetime_s=3600, timeout_s=600,
                                                 extra=["--dtype", args.dtype] if args.dtype else []))
            summary.setdefault("priority", []).append(boost(srv.proc.pid))
            workers.append(srv.url)
            summary.setdefault("server_start_s", []).append(round(srv.started_s, 1))
        from endpoint.server_info import identity

        summary["server"] = identity(workers[0])
        summary["workers"] = {u: {"cpus": [i]} for i, u in enumerate(workers)}
        print(f"servers up in {summary['server_start_s']} s", flush=True)
        if args.calibrate:
            from benchmarks.endpoint_validation import calibrate_server

            _, _, summary["calibration"] = calibrate_server(workers[0], out, quick=True)
            print(f"calibrated in {summary['calibration']['seconds']:.0f} s", flush=True)
        fragment = load_fragment(profile)
        for policy in args.policies:
            row = run_policy(policy, fragment, profile, workers, out, args.port + 2, args.repeats)
            summary["policies"].append(row)
            print_row(row)
    summary["total_s"] = time.perf_counter() - t0
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    summary["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    finish(out, summary, args.commit)
    print(f"results in {out}")
    return 0


def router_version() -> str | None:
    try:
        out = subprocess.run([str(ROUTER_VENV / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-router'))"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def readme(summary: dict) -> str:
    def pct(x):
        return "–" if x is None else f"{x:.1%}"

    again = (" (the tables below were made so, after the measurement run)" if summary.get("resimulated") else "")
    head = f"""# servesim's routers against a real router: two vLLM-CPU servers behind vllm-router

Written by `benchmarks/router_check.py` (issue 31, part 5). To reproduce (about 20 minutes):

```bash
bash benchmarks/vllm_cpu/install.sh          # vLLM-CPU in its own venv; SmolLM2-135M converted
bash benchmarks/vllm_cpu/install_router.sh   # vllm-router from the package index, its own venv
.venv/bin/python benchmarks/router_check.py {summary.get("command_args", "")}--commit
```

With `--resimulate --out benchmarks/results/router-check` it compares the committed measurements
(`*/run1`, `*/run2`) with the current simulator, without a server{again}.
"""
    lines = [*head.splitlines(), "",
             *summary.get("notes_top", []),
             "| policy (real / servesim) | n | E2E err | E2E spread | E2E adj. | TTFT err | TTFT spread | "
             "served A / B (run 1; run 2) | simulated | split err | split spread | E2E target | share target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["policies"]:
        ok = met(r)
        sim = summary["sim_router"][r["workload"]]["policy"]
        real = "; ".join(" / ".join(map(str, c)) for c in r["served_real"])
        lines.append(f"| {r['workload']} / {sim} | {r['requests']} | {pct(r['e2e_error'])} | {pct(r['e2e_spread'])} | "
                     f"{pct(r['e2e_adjusted'])} | {pct(r['ttft_error'])} | {pct(r['ttft_spread'])} | {real} | "
                     f"{' / '.join(map(str, r['served_sim']))} | {pct(r['share_error'])} | {pct(r['share_spread'])} | "
                     f"{'met' if ok['e2e'] else 'missed'} | {'met' if ok['share'] else 'missed'} |")
    w = summary["workload"]
    lines += ["", "*E2E / TTFT err*: median over requests of |sim − real| / real against the first measured run; "
              "*spread*: the second measured run against the first (median per request); *adj.*: E2E error with "
              "the simulation slowed by the servers' drift since calibration (the speed probe, through the "
              "router). *Served*: requests each server finished during the run (its `vllm:request_success_total` "
              "on its own `/metrics`, read before and after the run); *simulated*: the simulation's requests per "
              "replica; *split err*: the largest difference of a replica's share of requests, simulated against "
              "the first run, replicas matched by rank (the two servers are alike: which one a router fills first "
              "is a label); *split spread*: the same between the two runs.", "",
              "## Setup", "",
              f"- router: `vllm-router` {summary['router']['version']} from the package index, flags: "
              + "; ".join(f"{k}: `{' '.join(v)}`" for k, v in summary["router"]["flags"].items()),
              "- servesim routers: " + "; ".join(f"{k}: `{v}`" for k, v in summary["sim_router"].items()),
              f"- servers: vLLM {summary['server'].get('version')} CPU build, `{' '.join(vllm.ARGS)} "
              "--enable-prefix-caching"
              + (f" --dtype {summary['dtype']}" if summary.get("dtype", "bfloat16") != "bfloat16" else "")
              + "` (the last --dtype counts); server A's model threads on CPU 0, B's on CPU 1 "
              "(`VLLM_CPU_OMP_THREADS_BIND` = its core, `OMP_NUM_THREADS=1`, `VLLM_CPU_NUM_OF_RESERVED_CPU=0`), "
              "their API and engine processes on either core; "
              f"start {summary['server_start_s']} s; prefix caches emptied (`POST /reset_prefix_cache`, "
              "dev mode) before each policy; the router restarted for each policy",
              f"- workload: {w['num_requests']} requests, Poisson {w['arrival']['rate']} req/s, "
              f"{w['shared_prefix']['num_prompts']} shared system prompts of {w['shared_prefix']['length']} tokens "
              f"(uniform), each request's own {w['prompt_len']['min']}–{w['prompt_len']['max']} tokens after it, "
              f"{w['output_len']['min']}–{w['output_len']['max']} output tokens; run 2: the same lengths, arrivals "
              "and prefix choices, other words",
              ("- profile: server A's own quick calibration (`servesim calibrate --endpoint`), profile.json here"
               if summary.get("calibration") else
               f"- profile: `{summary['profile_from']}` (the vLLM-CPU calibration: the same server flags, its model "
               "threads on one core; copied here as profile.json)"),
              f"- priority: the servers, the router and the load generator at niceness {NICE}, their sessions' "
              f"autogroups too (got {summary.get('priority')}: load generator, server A, server B), ahead of the "
              "other work on the machine",
              f"- this run: {summary['started_utc']} – {summary['finished_utc']} UTC; machine load average "
              f"(1/5/15 min) before {summary['load_before']}, after {summary['load_after']}",
              *(f"- {n}" for n in summary.get("notes", [])), ""]
    return "\n".join(lines) + "\n"


def finish(out: Path, summary: dict, commit: bool) -> None:
    """summary.json and README.md in ``out``; with ``commit``, the results copied to
    benchmarks/results/router-check/."""
    from endpoint.records import write_json, write_text

    write_json(out / "summary.json", summary)
    write_text(out / "README.md", readme(summary))
    if commit:
        copy_results(out, COMMITTED, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml"),
                     [r["workload"] for r in summary["policies"]])


if __name__ == "__main__":
    sys.exit(main())
