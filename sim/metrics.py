"""Per-request metrics and the run's summary: latency percentiles, throughput, SLO, goodput."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.requests import RejectReason, RequestTable, Status

STATUS_NAMES = {Status.FINISHED: "finished", Status.REJECTED: "rejected"}
PERCENTILES = (50, 90, 99)


def requests_frame(table: RequestTable, slo=None) -> pd.DataFrame:
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
        "replica": t.replica,
        "arrival": t.arrival,
        "prompt_tokens": t.prompt_len,
        "output_tokens": t.num_generated,
        "max_output_tokens": t.output_len,
        "status": status,
        "reject_reason": reasons[t.reject_reason],
        "preemptions": t.preemptions,
        "first_scheduled": t.first_scheduled,
        "first_token": t.first_token,
        "completion": t.completion,
        "queueing_delay": t.first_scheduled - t.arrival,
        "ttft": ttft,
        "tpot": tpot,
        "e2e": e2e,
    })
    df["slo_met"] = slo_met(df, slo)
    return df


def slo_met(df: pd.DataFrame, slo) -> np.ndarray:
    """A request meets its SLO if it finished within every limit given (NaN TPOT passes)."""
    ok = (df["status"] == "finished").to_numpy().copy()
    if slo is None:
        return ok
    for col, limit in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
        if limit is not None:
            v = df[col].to_numpy()
            within = v <= limit
            if col == "tpot":
                within |= np.isnan(v)  # a single-token answer has no inter-token time
            ok &= within
    return ok


def _stats(x: pd.Series) -> dict[str, float]:
    x = x.dropna()
    if x.empty:
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    v = x.to_numpy()
    return {"mean": float(v.mean()), **{f"p{p}": float(np.percentile(v, p)) for p in PERCENTILES}}


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, *, num_gpus: int = 1,
              kv_blocks_total: int | None = None) -> dict:
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
        "steps": len(steps),
    }
    for col in ("ttft", "tpot", "e2e", "queueing_delay"):
        for k, v in _stats(fin[col]).items():
            summary[f"{col}_{k}"] = v
    if len(steps):
        busy = steps["duration"].to_numpy()
        summary["mean_batch_size"] = float(np.average(steps["num_seqs"], weights=busy))
        if kv_blocks_total:
            summary["mean_kv_utilization"] = float(
                np.average(steps["kv_blocks_used"], weights=busy) / kv_blocks_total)
    return summary
