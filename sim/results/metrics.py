"""Per-request metrics and the run's summary: latency percentiles, throughput, SLO, goodput."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.requests import RejectReason, RequestTable, Status

STATUS_NAMES = {Status.FINISHED: "finished", Status.REJECTED: "rejected"}
PERCENTILES = (50, 90, 99)


def requests_frame(table: RequestTable, slo=None, workload=None) -> pd.DataFrame:
    t = table
    status = np.where(t.status == Status.FINISHED, "finished",
                      np.where(t.status == Status.REJECTED, "rejected", "unfinished"))
    reasons = np.array([RejectReason(i).text for i in range(len(RejectReason))], dtype=object)
    ttft = t.first_token - t.arrival
    e2e = t.completion - t.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(t.num_generated > 1,
                        (t.completion - t.first_token) / (t.num_generated - 1), np.nan)
    df = pd.DataFrame({
        "request_id": np.arange(t.n),
        "class": np.asarray(t.class_names, dtype=object)[t.class_id],
        "replica": t.replica,
        "arrival": t.arrival,
        "prompt_tokens": t.prompt_len,
        "output_tokens": t.num_generated,
        "max_output_tokens": t.output_len,
        "status": status,
        "reject_reason": reasons[t.reject_reason],
        "preemptions": t.preemptions,
        "cached_tokens": t.cached_tokens,
        "first_scheduled": t.first_scheduled,
        "first_token": t.first_token,
        "completion": t.completion,
        "queueing_delay": t.first_scheduled - t.arrival,
        "ttft": ttft,
        "tpot": tpot,
        "e2e": e2e,
    })
    df["slo_met"] = slo_met(df, slo_limits(t.n, slo, workload))
    return df


def slo_limits(n: int, slo=None, workload=None) -> dict[str, np.ndarray]:
    """Per-request limits: the request class's where it has one, else the scenario's."""
    limits = {}
    for col in ("ttft", "tpot", "e2e"):
        default = getattr(slo, f"{col}_s", None) if slo is not None else None
        per_class = getattr(workload, f"slo_{col}", None) if workload is not None else None
        lim = np.full(n, np.nan if default is None else default)
        if per_class is not None:
            lim = np.where(np.isnan(per_class), lim, per_class)
        limits[col] = lim
    return limits


def slo_met(df: pd.DataFrame, limits: dict[str, np.ndarray]) -> np.ndarray:
    """A request meets its SLO if it finished within every limit it has (no limit: NaN).
    A single-token answer has no inter-token time and passes the TPOT limit."""
    ok = (df["status"] == "finished").to_numpy().copy()
    for col, lim in limits.items():
        v = df[col].to_numpy()
        within = np.isnan(lim) | (v <= lim)
        if col == "tpot":
            within |= np.isnan(v)
        ok &= within
    return ok


def _stats(x: pd.Series) -> dict[str, float]:
    x = x.dropna()
    if x.empty:
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    v = x.to_numpy()
    return {"mean": float(v.mean()), **{f"p{p}": float(np.percentile(v, p)) for p in PERCENTILES}}


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, *, num_gpus: int = 1,
              per_class: bool = True) -> dict:
    fin = requests[requests["status"] == "finished"]
    n = len(requests)
    start = float(requests["arrival"].min()) if n else 0.0
    end = float(fin["completion"].max()) if len(fin) else start
    duration = max(end - start, 1e-12)
    met = int(requests["slo_met"].sum())
    out_tokens = int(fin["output_tokens"].sum())
    summary = {
        "requests": n,
        "finished": len(fin),
        "rejected": int((requests["status"] == "rejected").sum()),
        "unfinished": int((requests["status"] == "unfinished").sum()),
        "duration_s": duration,
        "request_throughput": len(fin) / duration,
        "output_token_throughput": out_tokens / duration,
        "total_token_throughput": (out_tokens + int(fin["prompt_tokens"].sum())) / duration,
        "slo_attainment": met / n if n else float("nan"),
        "goodput": met / duration,
        "goodput_per_gpu": met / duration / num_gpus,
        "preemptions": int(requests["preemptions"].sum()),
        "prefix_hit_rate": float(requests["cached_tokens"].sum() / max(requests["prompt_tokens"].sum(), 1)),
        "steps": len(steps),
    }
    for col in ("ttft", "tpot", "e2e", "queueing_delay"):
        for k, v in _stats(fin[col]).items():
            summary[f"{col}_{k}"] = v
    if len(steps):
        busy = steps["duration"].to_numpy()
        summary["mean_batch_size"] = float(np.average(steps["num_seqs"], weights=busy))
        if "kv_utilization" in steps:
            summary["mean_kv_utilization"] = float(np.average(steps["kv_utilization"], weights=busy))
    classes = requests["class"].unique() if "class" in requests else []
    if per_class and len(classes) > 1:
        summary["classes"] = {
            str(c): summarize(requests[requests["class"] == c], steps.iloc[:0], num_gpus=num_gpus,
                              per_class=False) for c in classes}
    return summary
