"""KV cache offloading on vLLM-CPU: does it run, and a multi-turn workload whose conversations'
prefixes outgrow the primary KV cache, measured and simulated (issue #30).

    bash benchmarks/vllm_cpu/install.sh                    # once: vLLM's venv + SmolLM2-135M
    python benchmarks/kv_offload_validation.py [--profile P] [--quick] [--commit]
    python benchmarks/kv_offload_validation.py --resimulate [--commit]   # no server: sim side again

SmolLM2-135M (bfloat16, its converted weights) served by vLLM-CPU, every server process on one
core (``taskset``, one model thread), the load generator on the other, prefix caching on and
``--enable-prompt-tokens-details`` (each answer says how many prompt tokens came from a cache).
One multi-turn workload (``WORKLOAD``: sessions of 4-6 turns, each turn's prompt the whole
conversation so far; servesim's conversation generator, ``workload.yaml`` beside the results,
the same requests for every server and for the simulation) against:

- ``primary-large``: 512 MiB of KV cache (182 blocks of 128 tokens), every live prefix fits.
  Calibrated here (``servesim calibrate --endpoint``) unless ``--profile``.
- ``offload-*``: the small cache (24 blocks, 3,072 tokens) plus 1 GiB of CPU offload
  (``--kv-offloading-size``; the simple connector; the tiering spec). Each is started; one that
  vLLM refuses is recorded with its error line, one that serves is measured like the others.
- ``primary-small``: the small cache alone; the conversations' prefixes (several thousand
  tokens live) no longer fit and are recomputed.

Each served configuration runs the workload twice (``servesim validate --endpoint --repeats 2``;
the second run's own prompt words, so it hits nothing of the first) with vLLM's prefix-cache
counters (``vllm:prefix_cache_{queries,hits}_total``, the connector's
``vllm:external_prefix_cache_*``, ``vllm:prompt_tokens_cached_by_source{source=...}``,
``vllm:kv_offload_{load,store}_bytes``, preemptions) read before and after each run. The
simulation replays the first run's requests with the calibrated profile: each configuration as
served, and the small cache with servesim's ``kv_tiers`` (a 1 GiB CPU tier) against both the small
and the large cache measured (on this platform, where the "GPU" cache is itself CPU memory, the
large primary is what a free offload tier would give). Writes ``<out>/summary.json`` and
``README.md``; ``--commit`` copies them, the profile and the measured runs to
``benchmarks/results/vllm-cpu-offload/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.endpoint_validation import (  # noqa: E402
    calibrate_server,
    copy_results,
    load_avg,
    pin_client,
    row_of,
    scenario,
)
from benchmarks.router_check import boost  # noqa: E402
from benchmarks.tiny_arch_validation import error_line, first_request  # noqa: E402
from benchmarks.vllm_cpu import server as vllm  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "vllm-cpu-offload"
MiB = 1024**2
BLOCK = 128  # vLLM-CPU's block size (tokens)
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2  # SmolLM2-135M: 30 layers, K and V, 3 KV heads of 64, bfloat16
SMALL_BLOCKS = 24  # 3,072 tokens: the primary cache the conversations outgrow
SMALL_BYTES = SMALL_BLOCKS * BLOCK * KV_BYTES_PER_TOKEN
LARGE_BYTES = 512 * MiB  # the project's usual vLLM-CPU cache: 182 blocks, every live prefix fits
OFFLOAD_GIB = 1.0
# the tier servesim is given for the offload: 1 GiB of host memory per replica; a copy within one
# socket's memory (the "GPU" cache is host memory here too), about 10 GB/s, 0.1 ms to start
TIER = {"medium": "cpu", "capacity_gb": OFFLOAD_GIB, "bandwidth_gb_s": 10.0, "latency_s": 0.0001}  # GiB
KV_TIERS = {"load": "async", "min_load_tokens": 0, "tiers": [TIER]}

SERVER_FLAGS = ["--max-model-len", "2048", "--max-num-seqs", "32", "--max-num-batched-tokens", "512",
                "--enforce-eager", "--dtype", "bfloat16", "--enable-prompt-tokens-details"]

# name -> (KV cache bytes, more flags, more environment, what it is)
CONFIGS: dict[str, tuple[int, list[str], dict[str, str], str]] = {
    "primary-large": (LARGE_BYTES, [], {}, "512 MiB primary KV cache, no offload (every live prefix fits)"),
    "offload-native": (SMALL_BYTES, ["--kv-offloading-size", str(OFFLOAD_GIB), "--kv-offloading-backend", "native"],
                       {}, "small primary + 1 GiB CPU offload (OffloadingConnector, CPUOffloadingSpec)"),
    "offload-simple": (SMALL_BYTES, ["--kv-offloading-size", str(OFFLOAD_GIB)], {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"},
                       "small primary + 1 GiB CPU offload (SimpleCPUOffloadConnector)"),
    "offload-tiering": (SMALL_BYTES, ["--kv-transfer-config", json.dumps({
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                      "cpu_bytes_to_use": int(OFFLOAD_GIB * 2**30)}},
        separators=(",", ":"))], {}, "small primary + 1 GiB CPU offload (OffloadingConnector, TieringOffloadingSpec)"),
    "primary-small": (SMALL_BYTES, [], {}, f"{SMALL_BLOCKS}-block ({SMALL_BLOCKS * BLOCK}-token) primary KV cache, "
                                           "no offload"),
}


def workload(quick: bool) -> dict:
    """Sessions of 4-6 turns (a 128-token system prompt, then 128-320-token messages and 16-48-token
    answers), a new one every 4 s, a turn about every 24 s: about ten conversations live at once,
    their prefixes several thousand tokens, more than the small cache's 3,072."""
    return {"num_requests": 36 if quick else 100, "arrival": {"process": "poisson", "rate": 0.25},
            "shared_prefix": {"num_prompts": 1, "length": 128},
            "prompt_len": {"dist": "uniform", "min": 128, "max": 320},
            "output_len": {"dist": "uniform", "min": 16, "max": 48},
            "conversations": {"turns": {"dist": "uniform", "min": 4, "max": 6},
                              "think_time_s": {"dist": "exponential", "mean": 24}, "max_context": 2000}}


# -- the server's counters ---------------------------------------------------------------------
COUNTERS = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total",
            "external_queries": "vllm:external_prefix_cache_queries_total",
            "external_hits": "vllm:external_prefix_cache_hits_total",
            "prompt_tokens": "vllm:prompt_tokens_total", "preemptions": "vllm:num_preemptions_total",
            "offload_load_bytes": "vllm:kv_offload_load_bytes_total",
            "offload_store_bytes": "vllm:kv_offload_store_bytes_total",
            "simple_offload_load_blocks": "vllm:simple_kv_offload_load_blocks_total"}
BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"


def counters(url: str) -> dict | None:
    """vLLM's prefix-cache and offload counters now (None: no /metrics; a counter it lacks: None)."""
    from endpoint.server_metrics import scrape

    m = scrape(url)
    if m is None:
        return None
    out: dict = {k: m.value((name, name.removesuffix("_total"))) for k, name in COUNTERS.items()}
    by = {}
    for labels, v in m.samples.get(BY_SOURCE, []):
        by[labels.get("source", "?")] = by.get(labels.get("source", "?"), 0.0) + v
    out["cached_by_source"] = by
    return out


def deltas(folder: Path) -> list[dict]:
    """Per measured run: each counter after minus before."""
    out = []
    for run in sorted(folder.glob("run*")):
        w = json.loads((run / "summary.json").read_text()).get("watch") or {}
        b, a = w.get("before") or {}, w.get("after") or {}
        d = {k: (None if a.get(k) is None or b.get(k) is None else a[k] - b[k]) for k in COUNTERS}
        src_a, src_b = a.get("cached_by_source") or {}, b.get("cached_by_source") or {}
        d["cached_by_source"] = {s: v - src_b.get(s, 0.0) for s, v in src_a.items()}
        d["hit_rate"] = d["hits"] / d["queries"] if d.get("queries") else None
        ext = d.get("external_hits")
        d["external_hit_rate"] = ext / d["queries"] if ext is not None and d.get("queries") else None
        out.append(d)
    return out


# -- per-request figures ---------------------------------------------------------------------
def figures(req) -> dict:
    """Median TTFT / E2E of a request table's finished requests and its prefix-cache hit rate
    (cached prompt tokens over prompt tokens: the server's ``cached_tokens`` of each answer, or
    the simulation's)."""
    fin = req[req["status"] == "finished"]
    return {"n": len(req), "finished": len(fin), "ttft_median_s": float(fin["ttft"].median()),
            "e2e_median_s": float(fin["e2e"].median()), "ttft_mean_s": float(fin["ttft"].mean()),
            "e2e_mean_s": float(fin["e2e"].mean()), "prompt_tokens": int(fin["prompt_tokens"].sum()),
            "cached_tokens": int(fin["cached_tokens"].sum()),
            "hit_rate": float(fin["cached_tokens"].sum() / max(int(fin["prompt_tokens"].sum()), 1)),
            "preemptions": int(req["preemptions"].sum()) if "preemptions" in req else None}


def rel(a: float, b: float) -> float:
    return abs(a / b - 1) if b else float("nan")


def tier_fields(v) -> dict:
    """What the simulation reports of its KV tiers (its summary's ``kv_tiers``: the GPU's share
    of the served prompt tokens, and per tier the tokens loaded back, bytes moved each way)."""
    t = v.sim.summary.get("kv_tiers")
    if not t:
        return {}
    out = {k: t.get(k) for k in ("load", "write", "min_load_tokens", "gpu_hit_rate")}
    for medium, x in t.get("tiers", {}).items():
        out |= {f"{medium}_{k}": val for k, val in x.items()}
    return out


def kv_tiers_available() -> str | None:
    """None when servesim's scenarios take ``kv_tiers``, else why not."""
    from sim.scenario.schema import Scenario

    if "kv_tiers" not in Scenario.model_fields:
        return "servesim kv_tiers not available (no kv_tiers key in sim/scenario/schema.py's Scenario)"
    return None


def sim_row(name: str, v, against: str, scenario_note: str) -> dict:
    """One simulation compared with one configuration's measured runs."""
    from calibration.validate import metric_figures

    real, sim = figures(v.real.requests), figures(v.sim.requests)
    runs = [real] + ([figures(v.repeat.requests)] if v.repeat is not None else [])
    row = {"simulation": name, "against": against, "scenario": scenario_note, "sim": sim, "measured": runs,
           "per_request": metric_figures(v.to_json()),
           "median_ttft_diff": rel(sim["ttft_median_s"], real["ttft_median_s"]),
           "median_e2e_diff": rel(sim["e2e_median_s"], real["e2e_median_s"]),
           "hit_rate_diff": sim["hit_rate"] - real["hit_rate"], "tiers": tier_fields(v)}
    return row


# -- running ---------------------------------------------------------------------------------
def server_cmd(name: str, args) -> str:
    kv, extra, env, _ = CONFIGS[name]
    pre = " ".join(f"{k}={v}" for k, v in {**vllm.pinned_env([args.server_cpu]), **env}.items())
    return (f"{pre} taskset -c {args.server_cpu} vllm serve {vllm.MODEL} --served-model-name {vllm.NAME} "
            f"{' '.join(SERVER_FLAGS)} --kv-cache-memory-bytes {kv} --enable-prefix-caching "
            + " ".join(f"'{x}'" if x.startswith("{") else x for x in extra)).strip()


def start(name: str, out: Path, args, rec: dict):
    """The started server, or None with its error in ``rec['error']``."""
    kv, extra, env, _ = CONFIGS[name]
    log = out / f"server-{name}.log"
    rec["command"] = server_cmd(name, args)
    try:
        srv = vllm.start(args.port, log, prefix_caching=True, extra=extra, args=[*SERVER_FLAGS,
                         "--kv-cache-memory-bytes", str(kv)], omp_cpus=[args.server_cpu], env=env,
                         taskset=[args.server_cpu], timeout_s=600, lifetime_s=3600)
    except RuntimeError as e:
        rec["error"] = error_line(log) or str(e)
        return None
    why = first_request(srv.url, vllm.NAME)
    if why:
        time.sleep(2)
        srv.stop()
        rec["error"] = error_line(log) or why
        return None
    rec["server_start_s"] = srv.started_s
    return srv


def measure_config(name: str, srv, fragment: dict, w: dict, profile: Path, out: Path, args) -> tuple[dict, object]:
    """The workload twice against ``srv``, simulated with its own KV blocks."""
    from endpoint.server_info import identity
    from endpoint.validate import validate

    info = identity(srv.url)
    cache = info.get("cache_config", {})
    rec = {"version": info.get("version"), "cache_config": cache}
    sc = scenario(name, fragment_for(fragment, cache), w, out, prefix_caching=True)
    v = validate(sc, profile, srv.url, vllm.NAME, source=name, tokenizer=None, repeats=args.repeats,
                 out=out / name, log=None, watch=lambda: counters(srv.url))
    rec["validation"] = row_of(name, v, out)
    rec["counters"] = deltas(out / name)
    rec["runs"] = [figures(r.requests) for r in ([v.real] + ([v.repeat] if v.repeat is not None else []))]
    return rec, v


def fragment_for(fragment: dict, cache: dict, tiers: bool = False) -> dict:
    """The calibrated scenario fragment with this server's KV blocks (and servesim's tier)."""
    frag = json.loads(json.dumps(fragment))
    if cache.get("num_gpu_blocks"):
        frag["hardware"] = {**(frag.get("hardware") or {}), "kv_blocks": int(cache["num_gpu_blocks"])}
    if tiers:
        frag["kv_tiers"] = KV_TIERS
    return frag


def simulations(summary: dict, fragment: dict, profile: Path, out: Path) -> list[dict]:
    """Each served configuration simulated as served, and the small cache with servesim's tier
    against the small and the large cache measured."""
    from endpoint.validate import compare, read_runs

    w = summary["workload"]
    rows = []
    served = {c: r for c, r in summary["configs"].items() if "error" not in r and (out / c / "run1").is_dir()}
    for c, r in served.items():
        sc = scenario(c, fragment_for(fragment, r["cache_config"]), w, out, prefix_caching=True)
        v = compare(sc, profile, read_runs(out / c), {}, source=c, log=None)
        rows.append(sim_row(f"{c} (no tier)", v, c, f"kv_blocks {sc.hardware.kv_blocks}"))
    small = summary["configs"].get("primary-small", {})
    why = kv_tiers_available()
    if why:
        summary["kv_tiers"] = why
        return rows
    if "cache_config" in small:
        for c in ("primary-small", "primary-large"):
            if c in served:
                sc = scenario("primary-small+cpu-tier", fragment_for(fragment, small["cache_config"], tiers=True), w,
                              out, prefix_caching=True)
                v = compare(sc, profile, read_runs(out / c), {}, source=c, log=None)
                rows.append(sim_row("primary-small + kv_tiers cpu 1 GiB", v, c,
                                    f"kv_blocks {sc.hardware.kv_blocks}, kv_tiers {json.dumps(KV_TIERS)}"))
    summary["kv_tiers"] = "simulated"
    return rows


def run(args) -> dict:
    from endpoint.records import write_json, write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    w = workload(args.quick)
    write_text(out / "workload.yaml", yaml.safe_dump({"workload": w, "seed": 7}, sort_keys=False))
    summary: dict = {"started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                     "load_before": [round(x, 2) for x in load_avg()], "workload": w,
                     "command": "python benchmarks/kv_offload_validation.py" + (" --quick" if args.quick else "")
                     + (f" --profile {args.profile}" if args.profile else "") + (" --commit" if args.commit else ""),
                     "server_flags": SERVER_FLAGS, "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
                     "small_kv_bytes": SMALL_BYTES, "large_kv_bytes": LARGE_BYTES, "offload_gib": OFFLOAD_GIB,
                     "kv_tiers_sim": KV_TIERS, "configs": {}, "notes": list(args.note or [])}
    summary["client_cpus"] = pin_client(args.client_cpu)
    summary["priority_client"] = boost(0)
    profile = Path(args.profile) if args.profile else None
    fragment = None
    if profile is not None:
        fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
        fragment["cost"]["profile"] = str(profile.resolve())
        cal = profile.parent / "calibration.json"
        summary["calibration"] = {"reused": str(profile), **(json.loads(cal.read_text()) if cal.is_file() else {})}
    t0 = time.perf_counter()
    for name in CONFIGS:
        rec: dict = {"what": CONFIGS[name][3], "kv_cache_memory_bytes": CONFIGS[name][0]}
        summary["configs"][name] = rec
        srv = start(name, out, args, rec)
        if srv is None:
            print(f"{name}: refused: {rec['error']}", flush=True)
            write_json(out / "summary.json", summary)
            continue
        with srv:
            rec["priority"] = boost(srv.proc.pid)
            print(f"{name}: vLLM up in {srv.started_s:.0f} s", flush=True)
            if fragment is None:  # calibrated on the first server that serves (the large cache)
                profile, fragment, cal = calibrate_server(srv.url, out, quick=args.quick_calibration,
                                                          time_limit=args.calibration_limit)
                cal["mode"] = "quick" if args.quick_calibration else "full"
                cal["server"] = name
                summary["calibration"] = cal
                print(f"calibrated in {cal['seconds']:.0f} s: {cal['scheduler']}", flush=True)
            got, _ = measure_config(name, srv, fragment, w, profile, out, args)
            rec |= got
            for k, (r, c) in enumerate(zip(rec["runs"], rec["counters"], strict=False), start=1):
                print(f"{name} run {k}: TTFT median {r['ttft_median_s']:.3f} s, E2E median {r['e2e_median_s']:.3f} s, "
                      f"hit rate (answers) {r['hit_rate']:.1%}, (counters) {c['hit_rate'] or float('nan'):.1%}, "
                      f"external hits {c['external_hits']}, preemptions {c['preemptions']}", flush=True)
        write_json(out / "summary.json", summary)
    summary["measure_s"] = time.perf_counter() - t0
    summary["load_after"] = [round(x, 2) for x in load_avg()]
    summary["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if profile is not None:
        summary["profile"] = str(profile)
        summary["simulations"] = simulations(summary, fragment, profile, out)
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", readme(summary))
    return summary


def resimulate(args) -> dict:
    """No server: the simulations again from ``--out``'s measured runs and profile."""
    from endpoint.records import write_json, write_text

    out = Path(args.out)
    summary = json.loads((out / "summary.json").read_text())
    profile = out / "profile.json" if (out / "profile.json").is_file() else Path(summary["profile"])
    fragment = yaml.safe_load(profile.with_suffix(".scenario.yaml").read_text())
    fragment["cost"]["profile"] = str(profile.resolve())
    summary["kv_tiers_sim"] = KV_TIERS
    summary["notes"] = [*summary.get("notes", []), *(n for n in args.note or [] if n not in summary.get("notes", []))]
    summary["simulations"] = simulations(summary, fragment, profile, out)
    summary["resimulated_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", readme(summary))
    return summary


# -- README ----------------------------------------------------------------------------------
def pct(x) -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.1%}"


def ms(x) -> str:
    return "–" if x is None else f"{x * 1e3:.0f}"


def spread(runs: list[dict], key: str) -> float | None:
    return rel(runs[1][key], runs[0][key]) if len(runs) > 1 else None


REFUSALS = [
    "Where vLLM 0.32 refuses (its source, `vllm/` in the venv's site-packages):",
    "",
    "- `--kv-offloading-size N` (backend `native`) is `--kv-transfer-config` with the `OffloadingConnector` "
    "and `kv_connector_extra_config.cpu_bytes_to_use` (`config/vllm.py`, `_post_init_kv_transfer_config`). Its "
    "scheduler side starts; the worker's `CPUOffloadingSpec.get_worker` (`v1/kv_offload/cpu/spec.py`) raises "
    "unless `current_platform.is_cuda_alike() or current_platform.is_xpu()`, when the worker registers its KV "
    "caches, so the engine core fails at start-up. The tiering spec (`TieringOffloadingSpec`) subclasses it and "
    "fails the same way.",
    "- `VLLM_USE_SIMPLE_KV_OFFLOAD=1` picks the `SimpleCPUOffloadConnector` instead "
    "(`v1/simple_kv_offload/worker.py`): it asks `torch.cuda.Stream.priority_range()` for its copy streams, "
    "which the CPU platform's stream placeholder does not have (`kv_offload_backend: disk` builds the same "
    "streams).",
    "- LMCache (`--kv-offloading-backend lmcache`) is not installed in this venv.",
]
COUNTER_NOTE = [
    "Counters that would report the offload tier (read before and after every run; all in `summary.json`): "
    "`vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total` are the primary (\"GPU\") cache's, in "
    "tokens; `vllm:external_prefix_cache_hits_total` / `..._queries_total` are the KV connector's (the "
    "offload tier's hits, in tokens); `vllm:prompt_tokens_cached_by_source_total{source=device|host|disk|p2p|"
    "external_unspecified}` splits the hits by the tier that supplied them (its sources sum to the two hit "
    "counters); the offloading connector adds `vllm:kv_offload_load_bytes_total` / "
    "`vllm:kv_offload_store_bytes_total` (and `_time`, `_size`), the simple connector "
    "`vllm:simple_kv_offload_load_blocks_total`. With no connector running, the external counters stay 0."]


def readme(s: dict) -> str:
    served = {c: r for c, r in s["configs"].items() if "error" not in r}
    version = next((r.get("version") for r in served.values() if r.get("version")), "?")
    lines = ["# KV cache offloading on vLLM-CPU, and a multi-turn workload that outgrows the KV cache", "",
             "Written by `benchmarks/kv_offload_validation.py` (issue #30). To reproduce (about 20 minutes):", "",
             "```bash", "bash benchmarks/vllm_cpu/install.sh", s["command"], "```", "",
             f"- vLLM {version} (CPU build), SmolLM2-135M bfloat16, `{' '.join(s['server_flags'])} "
             "--enable-prefix-caching`; every server process on one core, the load generator on the other",
             f"- run {s['started_utc']} – {s.get('finished_utc', '?')} UTC; load average before {s['load_before']}, "
             f"after {s.get('load_after')} (2 cores, shared)",
             f"- workload (`workload.yaml`, seed 7, the same requests everywhere): `{json.dumps(s['workload'])}`"]
    cal = s.get("calibration") or {}
    if cal.get("seconds"):
        lines.append(f"- calibration ({cal.get('mode', '?')}, on {cal.get('server', '?')}): {cal['seconds']:.0f} s; "
                     f"scheduler {cal.get('scheduler')}; self-check {cal.get('self_check')}")
    lines += [*(f"- {n}" for n in s.get("notes", [])), "", "## Does vLLM-CPU offload KV blocks?", "",
              "| configuration | what | KV cache bytes | outcome |", "|---|---|---|---|"]
    for c, r in s["configs"].items():
        outcome = f"**refused**: `{r['error']}`" if "error" in r else "served"
        lines.append(f"| {c} | {r['what']} | {r['kv_cache_memory_bytes']:,} | {outcome} |")
    lines += ["", "Commands:", ""] + [f"- {c}: `{r['command']}`" for c, r in s["configs"].items() if r.get("command")]
    if any("error" in r for c, r in s["configs"].items() if c.startswith("offload-")):
        lines += ["", *REFUSALS, "", "The refused servers' logs around their error: `refused/`."]
    lines += ["", *COUNTER_NOTE]
    lines += ["", "## Measured (two runs each)", "",
              "Hit rate (answers): the answers' `usage.prompt_tokens_details.cached_tokens` over their prompt "
              "tokens; (counters): `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total` after minus "
              "before the run (the primary cache); external: `vllm:external_prefix_cache_hits_total` (hits a KV "
              "connector, i.e. the offload tier, supplied; `vllm:prompt_tokens_cached_by_source_total{source=host}` "
              "splits them by tier). Spread: run 2 against run 1.", "",
              "| configuration | run | n | TTFT median ms | E2E median ms | hit rate (answers) | hit rate (counters) | "
              "external hits | by source | preemptions |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c, r in served.items():
        for k, (f, d) in enumerate(zip(r.get("runs", []), r.get("counters", []), strict=False), start=1):
            src = ", ".join(f"{a} {b:.0f}" for a, b in sorted(d.get("cached_by_source", {}).items()) if b) or "–"
            lines.append(f"| {c} | {k} | {f['n']} | {ms(f['ttft_median_s'])} | {ms(f['e2e_median_s'])} | "
                         f"{pct(f['hit_rate'])} | {pct(d.get('hit_rate'))} | {d.get('external_hits')} | {src} | "
                         f"{d.get('preemptions')} |")
        runs = r.get("runs", [])
        if len(runs) > 1:
            lines.append(f"| {c} | spread | | {pct(spread(runs, 'ttft_median_s'))} | "
                         f"{pct(spread(runs, 'e2e_median_s'))} | {runs[1]['hit_rate'] - runs[0]['hit_rate']:+.1%} "
                         "(points) | | | | |")
    lines += ["", "## servesim against it", ""]
    if s.get("kv_tiers") and s["kv_tiers"] != "simulated":
        lines += [f"**{s['kv_tiers']}**: only the configurations as served were simulated.", ""]
    lines += ["The first measured run's requests replayed by the simulator with the calibrated profile. *Median "
              "diff*: |sim median − measured median| / measured; *per-request*: the median over requests of "
              "|sim − real| / real (servesim validate's figure); spread: the two measured runs' own. Hit rates: "
              "cached prompt tokens over prompt tokens, all levels (sim) and as the answers said (measured); *GPU* / "
              "*CPU tier*: the simulation's split (its summary's `kv_tiers`); *MB loaded / stored*: the bytes it "
              f"moved between the primary cache and the CPU tier (`kv_tiers` given to servesim: "
              f"`{json.dumps(s['kv_tiers_sim'])}`).", "",
              "| simulation | against measured | sim TTFT median ms | measured | median diff | per-request TTFT err "
              "(spread) | sim E2E median ms | measured | median diff | per-request E2E err (spread) | sim hit rate | "
              "measured hit rate | sim GPU / CPU tier | CPU tier MB loaded / stored |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s.get("simulations", []):
        sim, real, pr, t = r["sim"], r["measured"][0], r["per_request"], r["tiers"]
        split = f"{pct(t['gpu_hit_rate'])} / {pct(t.get('cpu_hit_rate'))}" if t else "–"
        moved = (f"{t.get('cpu_loaded_bytes', 0) / 1e6:.0f} / {t.get('cpu_stored_bytes', 0) / 1e6:.0f}"
                 if t else "–")
        lines.append(f"| {r['simulation']} | {r['against']} | {ms(sim['ttft_median_s'])} | {ms(real['ttft_median_s'])} "
                     f"| {pct(r['median_ttft_diff'])} | {pct(pr.get('ttft_error'))} ({pct(pr.get('ttft_spread'))}) | "
                     f"{ms(sim['e2e_median_s'])} | {ms(real['e2e_median_s'])} | {pct(r['median_e2e_diff'])} | "
                     f"{pct(pr.get('e2e_error'))} ({pct(pr.get('e2e_spread'))}) | {pct(sim['hit_rate'])} | "
                     f"{pct(real['hit_rate'])} | {split} | {moved} |")
    return "\n".join(lines) + "\n"


def commit(out: Path, summary: dict) -> None:
    from endpoint.records import write_text

    names = [c for c, r in summary["configs"].items() if "error" not in r and (out / c / "validation.json").is_file()]
    copy_results(out, RESULTS, ("summary.json", "README.md", "profile.json", "profile.scenario.yaml",
                                "calibration.json", "workload.yaml"), names)
    for c, r in summary["configs"].items():  # the refused servers' logs, from their error on
        log = out / f"server-{c}.log"
        if "error" in r and log.is_file():
            lines = log.read_text(errors="replace").splitlines()
            said = r["error"].split(": ", 1)[-1][:60]
            at = next((i for i, x in enumerate(lines) if said in x), len(lines) - 1)
            write_text(RESULTS / "refused" / f"{c}.log", "\n".join(lines[max(0, at - 40):at + 10]) + "\n")
    if (RESULTS / "profile.json").is_file():  # the fragment names the committed profile beside it
        frag = yaml.safe_load((RESULTS / "profile.scenario.yaml").read_text())
        frag["cost"]["profile"] = "profile.json"
        write_text(RESULTS / "profile.scenario.yaml", yaml.safe_dump(frag, sort_keys=False))
    shutil.copy2(out / "README.md", RESULTS / "README.md")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "results" / "kv-offload-validation"))
    p.add_argument("--port", type=int, default=8061)
    p.add_argument("--server-cpu", type=int, default=1, help="the core vLLM runs on (all its processes)")
    p.add_argument("--client-cpu", type=int, default=0, help="the core the load generator runs on")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    p.add_argument("--profile", default=None, help="skip calibration: this profile (profile.scenario.yaml beside it)")
    p.add_argument("--quick-calibration", action="store_true", help="servesim's quick calibration grid")
    p.add_argument("--calibration-limit", type=float, default=420.0, help="seconds for calibration at most")
    p.add_argument("--only", nargs="*", choices=list(CONFIGS), default=None, help="configurations to run")
    p.add_argument("--note", action="append", help="a line for the README (repeatable)")
    p.add_argument("--resimulate", action="store_true", help="no server: the simulations again from --out")
    p.add_argument("--commit", action="store_true", help="copy the results to benchmarks/results/vllm-cpu-offload/")
    args = p.parse_args(argv)
    if args.resimulate:
        summary = resimulate(args)
    else:
        why = vllm.installed()
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
        if args.only:
            for c in [c for c in CONFIGS if c not in args.only]:
                CONFIGS.pop(c)
        summary = run(args)
    print(readme(summary))
    if args.commit:
        commit(Path(args.out), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
