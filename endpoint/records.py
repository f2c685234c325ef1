"""Measured requests as the simulator's tables: ``requests.parquet`` with ``servesim run``'s
columns, ``itl.parquet`` (one row per inter-token gap) and ``summary.json``.

Definitions follow ``vllm bench serve``: TTFT = first chunk carrying a choice − send;
E2E = last such chunk − send; TPOT = (E2E − TTFT) / (output tokens − 1), output tokens from
``usage``; ITL = the gaps between consecutive chunks (one per chunk, so a chunk carrying
several tokens is one gap).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from endpoint.failures import failure_counts, kind_of
from endpoint.loadgen import LoadResult
from sim.results.jsonsafe import json_safe as _clean
from sim.results.metrics import slo_limits, slo_met, summarize


def requests_frame(result: LoadResult, slo=None, class_names=None, class_id=None) -> pd.DataFrame:
    """One row per request, the columns of ``sim.results.metrics.requests_frame`` (unknowns:
    replica and engine 0, no preemptions, scheduling time and energy NaN) plus ``error``. A failed request
    is ``rejected``, its ``reject_reason`` the failure's kind (``endpoint.failures.KINDS``)."""
    recs = result.records
    n = len(recs)
    ok = np.array([not r.error and r.chunks > 0 for r in recs], dtype=bool)
    arrival = np.array([r.sent for r in recs], dtype=float)
    first = np.where(ok, [r.first_token for r in recs], np.nan)
    last = np.where(ok, [r.last_token for r in recs], np.nan)
    out_tok = np.array([r.output_tokens if r.output_tokens is not None else r.chunks for r in recs],
                       dtype=np.int64)
    prompt = np.array([r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in recs],
                      dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(ok & (out_tok > 1), (last - first) / (out_tok - 1), np.nan)
    names = np.asarray(class_names or ("default",), dtype=object)
    cid = np.zeros(n, dtype=np.int64) if class_id is None else np.asarray(class_id)
    df = pd.DataFrame({
        "request_id": np.array([r.request_id for r in recs], dtype=np.int64),
        "class": names[cid],
        "replica": np.zeros(n, dtype=np.int64),
        "arrival_engine": np.zeros(n, dtype=np.int64),
        "arrival": arrival,
        "prompt_tokens": prompt,
        "output_tokens": np.where(ok, out_tok, 0),
        "max_output_tokens": np.array([r.max_tokens for r in recs], dtype=np.int64),
        "status": np.where(ok, "finished", "rejected"),
        "reject_reason": [kind_of(r.error) if r.error else "" for r in recs],
        "preemptions": np.zeros(n, dtype=np.int64),
        "cached_tokens": np.array([r.cached_tokens or 0 for r in recs], dtype=np.int64),
        "first_scheduled": np.full(n, np.nan),
        "first_token": first,
        "completion": last,
        "queueing_delay": np.full(n, np.nan),
        "ttft": first - arrival,
        "tpot": tpot,
        "e2e": last - arrival,
    })
    df["slo_met"] = slo_met(df, slo_limits(n, slo))
    df["energy_j"] = np.full(n, np.nan)  # a server's energy is not measured
    df["error"] = [r.error for r in recs]
    return df.sort_values("request_id", kind="stable").reset_index(drop=True)


def itl_frame(result: LoadResult) -> pd.DataFrame:
    rows = [(r.request_id, k, g) for r in result.records for k, g in enumerate(r.gaps, start=1)]
    return pd.DataFrame(rows, columns=["request_id", "token_index", "gap_s"]).astype(
        {"request_id": np.int64, "token_index": np.int64, "gap_s": float})


def bench_metrics(requests: pd.DataFrame, itl: pd.DataFrame, duration_s: float) -> dict[str, float]:
    """The figures ``vllm bench serve`` prints, from the same definitions (ms; per second), of
    the finished requests (``itl`` keeps every request's gaps)."""
    fin = requests[requests["status"] == "finished"]
    out = {"completed": len(fin), "duration_s": duration_s,
           "request_throughput": len(fin) / duration_s,
           "output_throughput": float(fin["output_tokens"].sum()) / duration_s,
           "total_token_throughput": float(fin["output_tokens"].sum() + fin["prompt_tokens"].sum())
           / duration_s}
    gaps = itl["gap_s"].to_numpy()[itl["request_id"].isin(fin["request_id"]).to_numpy()]
    for name, v in (("ttft", fin["ttft"].to_numpy()), ("tpot", fin["tpot"].dropna().to_numpy()),
                    ("itl", gaps), ("e2el", fin["e2e"].to_numpy())):
        if len(v):
            out |= {f"mean_{name}_ms": float(v.mean() * 1e3), f"median_{name}_ms": float(np.median(v) * 1e3),
                    f"p99_{name}_ms": float(np.percentile(v, 99) * 1e3)}
    return out


def write_json(path: Path, data) -> Path:
    return write_text(path, json.dumps(_clean(data), indent=2))


def write_text(path: Path, text: str) -> Path:
    """Write atomically: a temporary file beside, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def write_parquet(path: Path, df: pd.DataFrame) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def write_run(out: str | Path, result: LoadResult, requests: pd.DataFrame, itl: pd.DataFrame,
              meta: dict) -> dict[str, Path]:
    """``requests.parquet``, ``itl.parquet`` and ``summary.json`` (summary as ``servesim run``
    computes it, plus the bench figures, the client's overhead, the failures by kind and
    ``meta``)."""
    out = Path(out)
    summary = summarize(requests, pd.DataFrame({"duration": [], "num_seqs": []}))
    paths = {"requests": write_parquet(out / "requests.parquet", requests),
             "itl": write_parquet(out / "itl.parquet", itl)}
    paths["summary"] = write_json(out / "summary.json", {
        **meta, "mode": f"measured ({result.mode} loop)", "summary": summary,
        "bench": bench_metrics(requests, itl, result.duration_s), "client_overhead": result.client,
        "failures": {"requests": len(requests), **failure_counts(requests["error"]),
                     "retried": sum(r.retries for r in result.records)},
        "errors": sorted({e for e in requests["error"] if e})[:10]})
    return paths
