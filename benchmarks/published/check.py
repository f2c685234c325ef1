#!/usr/bin/env python3
"""Validate the published-measurements benchmark and print its coverage.

Standalone (needs only PyYAML). Loads every ``sources/*.yaml`` next to this file, checks the
schema described in README.md, checks that every case's ``split`` follows the documented rule,
prints counts and the coverage matrix, and exits non-zero if anything is wrong.

    python benchmarks/published/check.py            # validate + coverage
    python benchmarks/published/check.py --markdown # also print the README tables as Markdown
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

CATALOG_MODELS = {  # servesim catalog name -> size class used in the coverage matrix
    "llama-2-7b": "dense-7-8B", "llama-3-8b": "dense-7-8B", "mistral-7b": "dense-7-8B",
    "qwen2.5-7b": "dense-7-8B", "llama-2-70b": "dense-70B", "llama-3-70b": "dense-70B",
    "mixtral-8x7b": "moe", "mixtral-8x22b": "moe", "llama-4-scout": "moe", "llama-4-maverick": "moe",
    "qwen3-30b-a3b": "moe", "qwen3-235b-a22b": "moe", "qwen3-235b-a22b-fp8": "moe", "deepseek-v3": "mla-moe",
    "deepseek-r1": "mla-moe", "gpt-oss-120b": "moe", "gpt-oss-20b": "moe", "qwen3-8b": "dense-7-8B",
    # issue 28 part 4: the 128K-context Llama 3.1/3.3 catalog entries (run as named, no llama-3 -> 3.1 mapping)
    "llama-3.1-8b": "dense-7-8B", "llama-3.1-70b": "dense-70B", "llama-3.3-70b": "dense-70B",
    "llama-3.1-405b": "dense-405B", "qwen3-32b": "dense-32B",
}
CATALOG_GPUS = {"A100-40GB", "A100-80GB", "H100-SXM", "H200", "L40S", "B200", "H800",
                # issue 28 part 4: further sim/scenario/data/gpus.yaml entries the new sources use
                "GB200-NVL72", "RTX-PRO-6000", "MI300X", "MI325X", "MI355X", "H100-PCIe", "H100-NVL", "L4"}
ENGINES = {"tensorrt-llm", "vllm", "sglang", "nim", "tgi", "lmdeploy", "deepspeed-mii", "other"}
DTYPES = {"bf16", "fp16", "fp8", "int8", "int4", "fp4"}
WEIGHT_DTYPES = DTYPES | {"checkpoint"}  # checkpoint: the model's own per-group dtypes (quantization_config)
KINDS = {"static", "concurrency", "rate", "single", "trace"}  # trace: replay a published trace
FAMILY = {
    "ttft_mean_s": "ttft", "ttft_median_s": "ttft", "ttft_p99_s": "ttft",
    "first_token_latency_s": "ttft",
    "itl_mean_s": "itl-tpot", "itl_median_s": "itl-tpot", "tpot_mean_s": "itl-tpot",
    "tpot_median_s": "itl-tpot",
    "e2e_mean_s": "e2e", "e2e_median_s": "e2e",
    "output_throughput": "throughput", "output_throughput_per_gpu": "throughput",
    "total_throughput": "throughput", "request_throughput": "throughput",
    # Added for issue 30 (wide EP, KV tiers); every case using one must name what it `needs`.
    "input_throughput_per_node": "throughput", "output_throughput_per_node": "throughput",
    "cache_hit_rate": "kv-hit",
}
NEW_METRICS = {"input_throughput_per_node", "output_throughput_per_node", "cache_hit_rate"}
# What a case needs that benchmarks/published.py cannot simulate yet (it skips such cases).
NEEDS = {"wide-ep", "dp-attention", "pd-disagg", "mtp", "kv-tiers", "multi-turn", "trace-replay"}
CASE_OPTIONAL = {"needs", "ep", "dp_attention", "disagg", "mtp", "kv_tiers", "limits"}
# The engine's limits a source states per case (copied from its command line), for the harness.
LIMITS = {"max_batch_size_per_rank", "max_num_tokens_per_rank", "kv_cache_free_gpu_mem_fraction"}
DISAGG_KEYS = {"prefill_gpus", "decode_gpus", "measured"}
KV_TIER_NAMES = {"gpu", "cpu", "remote", "ssd"}
SOURCE_REQUIRED = ["id", "title", "publisher", "url", "repository", "path", "commit", "engine",
                   "engine_version", "date", "method"]
SOURCE_OPTIONAL = {"ref", "date_note"}
CASE_REQUIRED = ["id", "table", "model", "gpu", "num_gpus", "tp", "pp", "weights", "kv_cache",
                 "workload", "metric", "value", "published", "assumptions", "split"]
WORKLOAD_KEYS = ["kind", "batch_size", "concurrency", "rate", "input_len", "output_len",
                 "dataset", "num_prompts"]
# Optional workload keys (issue 30): multi-turn runs and per-GPU batch of a saturated phase.
WORKLOAD_OPTIONAL = {"clients", "rounds", "round", "batch_per_gpu", "tokens_per_gpu"}
KEBAB = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def load_extra(name: str, key: str) -> dict:
    """models_needed.yaml / gpus_needed.yaml: {key: [{name: ..., ...}]} (optional files)."""
    path = HERE / name
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {entry["name"]: entry for entry in data.get(key, [])}


def expected_splits(cases: list[dict]) -> dict[str, str]:
    """The split rule: per (source, metric family), sort by case id, alternate fit/holdout."""
    strata: dict[tuple, list[str]] = defaultdict(list)
    for c in cases:
        strata[(c["_source"], FAMILY.get(c["metric"], "?"))].append(c["id"])
    out = {}
    for ids in strata.values():
        for i, cid in enumerate(sorted(ids)):
            out[cid] = "fit" if i % 2 == 0 else "holdout"
    return out


def check(problems: list[str]) -> tuple[list[dict], list[dict]]:
    models = dict(CATALOG_MODELS)
    for name, entry in load_extra("models_needed.yaml", "models").items():
        models[name] = entry.get("size_class", "other")
    gpus = CATALOG_GPUS | set(load_extra("gpus_needed.yaml", "gpus"))

    sources, cases = [], []
    files = sorted((HERE / "sources").glob("*.yaml"))
    if not files:
        problems.append("no source files under sources/")
    seen_sources, seen_cases = set(), set()
    for path in files:
        doc = yaml.safe_load(path.read_text())
        where = path.name
        if not isinstance(doc, dict) or set(doc) != {"source", "cases"}:
            problems.append(f"{where}: top level must have exactly 'source' and 'cases'")
            continue
        src = doc["source"]
        for key in SOURCE_REQUIRED:
            if key not in src:
                problems.append(f"{where}: source lacks '{key}'")
        for key in set(src) - set(SOURCE_REQUIRED) - SOURCE_OPTIONAL:
            problems.append(f"{where}: unknown source field '{key}'")
        sid = src.get("id", "")
        if not isinstance(sid, str) or not KEBAB.match(sid):
            problems.append(f"{where}: source id {sid!r} is not kebab-case")
        if path.stem != sid:
            problems.append(f"{where}: file name must be <source id>.yaml")
        if sid in seen_sources:
            problems.append(f"{where}: duplicate source id {sid}")
        seen_sources.add(sid)
        if src.get("engine") not in ENGINES:
            problems.append(f"{where}: engine {src.get('engine')!r} not in {sorted(ENGINES)}")
        if not isinstance(src.get("date"), str) or not DATE.match(src["date"]):
            problems.append(f"{where}: date {src.get('date')!r} is not YYYY[-MM[-DD]]")
        commit = src.get("commit")
        if commit is not None and not (isinstance(commit, str) and HEX40.match(commit)):
            problems.append(f"{where}: commit must be 40 hex digits or null")
        if src.get("repository") and commit is None and not src.get("ref"):
            problems.append(f"{where}: repository source without commit needs a 'ref'")
        for key in ("title", "publisher", "url", "engine_version", "method"):
            if key in src and not (isinstance(src[key], str) and src[key].strip()):
                problems.append(f"{where}: source '{key}' must be a non-empty string")
        sources.append(src)
        if not isinstance(doc["cases"], list) or not doc["cases"]:
            problems.append(f"{where}: 'cases' must be a non-empty list")
            continue
        for c in doc["cases"]:
            cid = c.get("id", "?")
            w = f"{where}:{cid}"
            for key in CASE_REQUIRED:
                if key not in c:
                    problems.append(f"{w}: lacks '{key}'")
            for key in set(c) - set(CASE_REQUIRED) - CASE_OPTIONAL:
                problems.append(f"{w}: unknown case field '{key}'")
            check_optional(c, w, problems)
            if not isinstance(cid, str) or not KEBAB.match(cid):
                problems.append(f"{w}: case id is not kebab-case")
            if cid in seen_cases:
                problems.append(f"{w}: duplicate case id")
            seen_cases.add(cid)
            if c.get("model") not in models:
                problems.append(f"{w}: model {c.get('model')!r} not in catalog or models_needed.yaml")
            if c.get("gpu") not in gpus:
                problems.append(f"{w}: gpu {c.get('gpu')!r} not in catalog or gpus_needed.yaml")
            for key in ("num_gpus", "tp", "pp"):
                if not (isinstance(c.get(key), int) and c[key] >= 1):
                    problems.append(f"{w}: {key} must be a positive integer")
            sizes = all(isinstance(c.get(k), int) and c[k] >= 1 for k in ("num_gpus", "tp", "pp"))
            if sizes and c["num_gpus"] % (c["tp"] * c["pp"]):
                problems.append(f"{w}: num_gpus is not a multiple of tp*pp")
            for key, allowed in (("weights", WEIGHT_DTYPES), ("kv_cache", DTYPES)):
                if c.get(key) not in allowed:
                    problems.append(f"{w}: {key} {c.get(key)!r} not in {sorted(allowed)}")
            if c.get("metric") not in FAMILY:
                problems.append(f"{w}: metric {c.get('metric')!r} not allowed")
            v = c.get("value")
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and v > 0):
                problems.append(f"{w}: value must be a finite number > 0")
            if not (isinstance(c.get("published"), str) and c["published"].strip()):
                problems.append(f"{w}: 'published' must quote the printed figure")
            if not (isinstance(c.get("table"), str) and c["table"].strip()):
                problems.append(f"{w}: 'table' must name where in the source the figure is")
            if not (isinstance(c.get("assumptions"), list)
                    and all(isinstance(a, str) for a in c["assumptions"])):
                problems.append(f"{w}: assumptions must be a list of strings")
            if c.get("split") not in ("fit", "holdout"):
                problems.append(f"{w}: split must be fit or holdout")
            wl = c.get("workload")
            if not (isinstance(wl, dict) and set(WORKLOAD_KEYS) <= set(wl) <= set(WORKLOAD_KEYS) | WORKLOAD_OPTIONAL):
                problems.append(f"{w}: workload must have exactly {WORKLOAD_KEYS} (plus optional "
                                f"{sorted(WORKLOAD_OPTIONAL)})")
            else:
                check_workload(wl, w, problems)
            c["_source"] = sid
            c["_engine"] = src.get("engine")
            c["_size"] = models.get(c.get("model"), "?")
            cases.append(c)

    want = expected_splits([c for c in cases if c.get("metric") in FAMILY])
    for c in cases:
        if c.get("id") in want and c.get("split") != want[c["id"]]:
            problems.append(f"{c['_source']}:{c['id']}: split is {c.get('split')}, rule says "
                            f"{want[c['id']]}")
    strata = defaultdict(Counter)
    for c in cases:
        strata[(c["_source"], FAMILY.get(c.get("metric"), "?"))][c.get("split")] += 1
    for key, cnt in strata.items():
        if not 0 <= cnt["fit"] - cnt["holdout"] <= 1:
            problems.append(f"stratum {key}: unbalanced split {dict(cnt)}")
    return sources, cases


def check_optional(c: dict, w: str, problems: list[str]) -> None:
    """The optional case fields added for issue 30 (see README, "Wide EP, disaggregation and KV tiers")."""
    limits = c.get("limits")
    if limits is not None and not (isinstance(limits, dict) and limits and set(limits) <= LIMITS
                                   and all(isinstance(v, (int, float)) and v > 0 for v in limits.values())):
        problems.append(f"{w}: limits must map some of {sorted(LIMITS)} to positive numbers")
    needs = c.get("needs")
    if needs is not None and not (isinstance(needs, list) and needs and set(needs) <= NEEDS):
        problems.append(f"{w}: needs must be a non-empty list from {sorted(NEEDS)}")
    if c.get("metric") in NEW_METRICS and not needs:
        problems.append(f"{w}: metric {c['metric']} is not simulated yet: the case must list its 'needs'")
    for key in ("ep", "dp_attention", "mtp"):
        v = c.get(key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            problems.append(f"{w}: {key} must be a non-negative integer")
    d = c.get("disagg")
    if d is not None:
        if not (isinstance(d, dict) and set(d) == DISAGG_KEYS):
            problems.append(f"{w}: disagg must have exactly {sorted(DISAGG_KEYS)}")
        elif d["measured"] not in ("prefill", "decode", "both"):
            problems.append(f"{w}: disagg.measured must be prefill, decode or both")
        elif "pd-disagg" not in (needs or []):
            problems.append(f"{w}: a disagg case needs [pd-disagg]")
    tiers = c.get("kv_tiers")
    if tiers is not None:
        ok = isinstance(tiers, list) and tiers and all(
            isinstance(t, dict) and t.get("tier") in KV_TIER_NAMES and set(t) <= {"tier", "size_gb", "note"}
            for t in tiers)
        if not ok:
            problems.append(f"{w}: kv_tiers must be a list of {{tier: {sorted(KV_TIER_NAMES)}, size_gb, note}}")
        elif "kv-tiers" not in (needs or []):
            problems.append(f"{w}: a kv_tiers case needs [kv-tiers]")
    if c.get("metric") == "cache_hit_rate" and isinstance(c.get("value"), (int, float)) and c["value"] > 1:
        problems.append(f"{w}: cache_hit_rate is a fraction (0, 1]")


def check_workload(wl: dict, w: str, problems: list[str]) -> None:
    kind = wl["kind"]
    if kind not in KINDS:
        problems.append(f"{w}: workload kind {kind!r} not in {sorted(KINDS)}")
        return

    def pos_int(key):
        return isinstance(wl[key], int) and not isinstance(wl[key], bool) and wl[key] >= 1

    for key in ("batch_size", "concurrency", "input_len", "output_len", "num_prompts",
                *sorted(WORKLOAD_OPTIONAL & set(wl))):
        if wl[key] is not None and not pos_int(key):
            problems.append(f"{w}: workload {key} must be a positive integer or null")
    if kind == "static" and not pos_int("batch_size"):
        problems.append(f"{w}: static workload needs batch_size")
    if kind == "concurrency" and not pos_int("concurrency"):
        problems.append(f"{w}: concurrency workload needs concurrency")
    if kind == "single" and any(wl[k] not in (None, 1) for k in ("batch_size", "concurrency")):
        problems.append(f"{w}: single workload must have batch_size/concurrency 1 or null")
    if kind == "rate":
        r = wl["rate"]
        if not (isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0):
            problems.append(f"{w}: rate workload needs rate > 0 (.inf = all requests at once)")
    elif wl["rate"] is not None:
        problems.append(f"{w}: rate must be null unless kind is rate")
    if kind == "trace" and not wl["dataset"]:
        problems.append(f"{w}: trace workload needs the trace's name in dataset")
    if wl["dataset"] is None and (wl["input_len"] is None or wl["output_len"] is None):
        problems.append(f"{w}: without a dataset, input_len and output_len are required")
    if wl["dataset"] is not None and not isinstance(wl["dataset"], str):
        problems.append(f"{w}: dataset must be a string or null")


def dtype_of(c: dict) -> str:
    return "fp8" if c["weights"] == "fp8" else ("bf16/fp16" if c["weights"] in ("bf16", "fp16")
                                                 else c["weights"])


def buckets(c: dict) -> list[str]:
    """The coverage buckets the issue asks for, that this case falls in."""
    fam = FAMILY[c["metric"]]
    wl = c["workload"]
    out = []
    load = wl["concurrency"] or wl["batch_size"]
    if wl["kind"] == "single":
        load = 1
    if fam == "ttft" and wl["input_len"]:
        if wl["input_len"] <= 256:
            out.append("ttft: short prompt (<=256)")
        if wl["input_len"] >= 2000:
            out.append("ttft: long prompt (>=2k)")
    if fam == "itl-tpot" and load:
        if load == 1:
            out.append("itl/tpot: concurrency or batch 1")
        if load >= 32:
            out.append("itl/tpot: concurrency or batch >=32")
    if fam == "itl-tpot" and wl["kind"] == "rate":
        out.append("itl/tpot: open-loop rate")
    if fam == "throughput":
        if wl["kind"] == "static":
            out.append("throughput: static batch")
        else:
            out.append("throughput: continuous/serving")
    out.append(f"gpu: {c['gpu']}")
    out.append(f"model: {c['_size']}")
    out.append(f"dtype: {dtype_of(c)}")
    out.append(f"tp: {c['tp']}")
    return out


REQUIRED_BUCKETS = [
    "ttft: short prompt (<=256)", "ttft: long prompt (>=2k)",
    "itl/tpot: concurrency or batch 1", "itl/tpot: concurrency or batch >=32",
    "throughput: static batch", "throughput: continuous/serving",
    "gpu: A100-80GB", "gpu: H100-SXM", "gpu: H200",
    "model: dense-7-8B", "model: dense-70B", "model: moe",
    "dtype: bf16/fp16", "dtype: fp8", "tp: 1", "tp: 2", "tp: 4", "tp: 8",
]


def report(sources: list[dict], cases: list[dict], markdown: bool, problems: list[str]) -> None:
    by_src = defaultdict(list)
    for c in cases:
        by_src[c["_source"]].append(c)
    print(f"{len(cases)} figures from {len(sources)} source files")
    print()
    print("Per source (fit/holdout):")
    for s in sources:
        cs = by_src[s["id"]]
        n_fit = sum(c["split"] == "fit" for c in cs)
        print(f"  {s['id']:<44} {s['engine']:<13} {str(s['engine_version'])[:28]:<28} "
              f"{s['date']:<8} {len(cs):>3}  ({n_fit}/{len(cs) - n_fit})")
    fams = ["ttft", "itl-tpot", "e2e", "throughput", "kv-hit"]
    print()
    print("Metric family x split:")
    for f in fams:
        cs = [c for c in cases if FAMILY[c["metric"]] == f]
        print(f"  {f:<11} {len(cs):>3}  fit {sum(c['split'] == 'fit' for c in cs):>3}  "
              f"holdout {sum(c['split'] == 'holdout' for c in cs):>3}")

    skipped = Counter(n for c in cases for n in c.get("needs") or [])
    print()
    print(f"Cases that need what servesim's harness does not simulate yet: "
          f"{sum(bool(c.get('needs')) for c in cases)} ({', '.join(f'{k} {v}' for k, v in sorted(skipped.items()))})")

    def table(title, key):
        cols = sorted({key(c) for c in cases}, key=str)
        print()
        print(f"{title} (rows: metric family)")
        print("  " + " " * 11 + "".join(f"{col!s:>12}" for col in cols))
        for f in fams:
            row = Counter(key(c) for c in cases if FAMILY[c["metric"]] == f)
            print(f"  {f:<11}" + "".join(f"{row.get(col, 0):>12}" for col in cols))

    table("Metric family x GPU", lambda c: c["gpu"])
    table("Metric family x model size", lambda c: c["_size"])
    table("Metric family x weight dtype", dtype_of)
    table("Metric family x TP", lambda c: f"tp{c['tp']}")
    print()
    print("Full coverage matrix (family, GPU, model size, dtype, TP: count):")
    full = Counter((FAMILY[c["metric"]], c["gpu"], c["_size"], dtype_of(c), c["tp"]) for c in cases)
    for k in sorted(full, key=str):
        print(f"  {k[0]:<11} {k[1]:<10} {k[2]:<11} {k[3]:<10} tp{k[4]}: {full[k]}")
    print()
    print("Coverage buckets from the issue (all / holdout):")
    cnt, hold = Counter(), Counter()
    for c in cases:
        for b in buckets(c):
            cnt[b] += 1
            hold[b] += c["split"] == "holdout"
    for b in REQUIRED_BUCKETS + sorted(set(cnt) - set(REQUIRED_BUCKETS)):
        flag = "" if cnt[b] else "   <-- MISSING"
        print(f"  {b:<38} {cnt[b]:>3} / {hold[b]:>3}{flag}")
        if b in REQUIRED_BUCKETS and not cnt[b]:
            problems.append(f"coverage bucket '{b}' is empty")
    holdout_sources = {c["_source"] for c in cases if c["split"] == "holdout"}
    for s in sources:
        if s["id"] not in holdout_sources:
            problems.append(f"source {s['id']} has no held-out case")
    if len(cases) < 40:
        problems.append(f"only {len(cases)} figures (need >= 40)")
    if len({s['publisher'] for s in sources}) < 2 or len(sources) < 4:
        problems.append("need >= 4 sources")
    if markdown:
        print_markdown(sources, by_src, full)


def print_markdown(sources, by_src, full):
    print()
    print("| id | publisher | engine + version | date | measures | cases (fit/holdout) |")
    print("|---|---|---|---|---|---|")
    for s in sources:
        cs = by_src[s["id"]]
        fams = sorted({FAMILY[c["metric"]] for c in cs})
        n_fit = sum(c["split"] == "fit" for c in cs)
        print(f"| `{s['id']}` | {s['publisher']} | {s['engine']} {s['engine_version']} | "
              f"{s['date']} | {', '.join(fams)} | {len(cs)} ({n_fit}/{len(cs) - n_fit}) |")
    print()
    print("| family | GPU | model size | weights | TP | cases |")
    print("|---|---|---|---|---|---|")
    for k in sorted(full, key=str):
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {full[k]} |")


def main() -> int:
    problems: list[str] = []
    sources, cases = check(problems)
    if cases and not any(p for p in problems if "lacks" in p or "workload" in p):
        report(sources, cases, "--markdown" in sys.argv, problems)
    print()
    if problems:
        print(f"{len(problems)} problem(s):")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
