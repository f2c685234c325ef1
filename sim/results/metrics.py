"""Per-request metrics and the run's summary: latency percentiles, throughput, SLO, goodput."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd

from sim.core.requests import RejectReason, RequestTable, Status

STATUS_NAMES = {Status.FINISHED: "finished", Status.REJECTED: "rejected"}
LATENCY_KEY = re.compile(r"^(ttft|tpot|itl|e2e|queueing_delay)_(mean|p\d+)$")
PERCENTILES = (50, 90, 99)


def labels(codes: np.ndarray, names: list[str]):
    """``names[codes]`` as a pandas string column, made by pyarrow from the codes (a Python
    string per row would cost more than the rest of the table)."""
    import pyarrow as pa

    words = pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes)), pa.array(names, type=pa.string()))
    words = words.cast(pa.string())
    default = pd.Series(["x"]).dtype  # what pandas makes of strings: str (pandas 3), object (2)
    if pd.api.types.is_object_dtype(default):
        return words.to_numpy(zero_copy_only=False)
    return pd.array(words, dtype=default)


def requests_frame(table: RequestTable, slo=None, workload=None) -> pd.DataFrame:
    t = table
    status = np.where(t.status == Status.FINISHED, 0, np.where(t.status == Status.REJECTED, 1, 2)).astype(np.int8)
    reasons = [RejectReason(i).text for i in range(len(RejectReason))]
    ttft = t.first_token - t.arrival
    e2e = t.completion - t.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(t.num_generated > 1,
                        (t.completion - t.first_token) / (t.num_generated - 1), np.nan)
    df = pd.DataFrame({
        "request_id": np.arange(t.n),
        "class": labels(t.class_id, list(t.class_names)),
        "replica": t.replica,
        # the engine it queued at on arrival: a pipelined replica's virtual engine; with
        # disaggregation, its prefill engine (``replica`` is then where it decoded)
        "arrival_engine": np.where(t.source >= 0, t.source, t.engine),
        "arrival": t.arrival,
        "prompt_tokens": t.prompt_len,
        "output_tokens": t.num_generated,
        "max_output_tokens": t.output_len,
        "status": labels(status, ["finished", "rejected", "unfinished"]),
        "reject_reason": labels(t.reject_reason, reasons),
        "preemptions": t.preemptions,
        "cached_tokens": t.cached_tokens,
        "first_scheduled": t.first_scheduled,
        "first_token": t.first_token,
        "completion": t.completion,
        "queueing_delay": t.first_scheduled - t.arrival,
        "ttft": ttft,
        "tpot": tpot,
        "e2e": e2e,
    }, copy=False)  # the table's own columns: nothing changes them after the run
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


def itl_stats(hist: np.ndarray, total_ns: int) -> dict[str, float]:
    """Mean and percentiles of inter-token gaps from their histogram (200 bins per decade from
    1 µs: percentiles to within 0.6%) and their sum in nanoseconds (the mean to 1 ns)."""
    from sim.core.state import ITL_LOG_MIN, ITL_PER_DECADE

    n = int(hist.sum())
    if not n:
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    cum = np.cumsum(hist)
    mid = 10.0 ** (ITL_LOG_MIN + (np.arange(len(hist)) + 0.5) / ITL_PER_DECADE)
    out = {"mean": total_ns / n / 1e9}
    for p in PERCENTILES:
        out[f"p{p}"] = float(mid[int(np.searchsorted(cum, p / 100 * n, side="left"))])
    return out


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, *, num_gpus: int = 1,
              per_class: bool = True, itl: dict | None = None, workload=None) -> dict:
    """The run's figures. Throughput is over first arrival to last completion (the drain
    counts); goodput is SLO attainment times the offered rate, over the arrival window (so 40
    req/s offered at 99.8% reads 39.9, whatever the drain). ``workload`` (when given) adds
    what ended the arrivals and its bursts (``results.queue``)."""
    fin = requests[requests["status"] == "finished"]
    n = len(requests)
    start = float(requests["arrival"].min()) if n else 0.0
    end = float(fin["completion"].max()) if len(fin) else start
    duration = max(end - start, 1e-12)
    arrivals = requests["arrival"].to_numpy()
    span = float(arrivals.max() - arrivals.min()) if n > 1 else 0.0
    met = int(requests["slo_met"].sum())
    out_tokens = int(fin["output_tokens"].sum())
    summary = {
        "requests": n,
        "finished": len(fin),
        "rejected": int((requests["status"] == "rejected").sum()),
        "unfinished": int((requests["status"] == "unfinished").sum()),
        "duration_s": duration,  # first arrival to last completion: the drain after the arrivals counts
        "arrival_span_s": span,  # first to last arrival
        # the load offered: arrivals per second while they came (n - 1 gaps over the span)
        "offered_rate": (n - 1) / span if span > 0 else float("nan"),
        "request_throughput": len(fin) / duration,
        "output_token_throughput": out_tokens / duration,
        "total_token_throughput": (out_tokens + int(fin["prompt_tokens"].sum())) / duration,
        "slo_attainment": met / n if n else float("nan"),
        # over the arrival window: requests meeting the SLO per second of offered traffic
        "goodput": _goodput(met, n, span, duration),
        "goodput_per_gpu": _goodput(met, n, span, duration) / num_gpus,
        "preemptions": int(requests["preemptions"].sum()),
        # over the prompts that were served (rejected ones never could hit the cache)
        "prefix_hit_rate": float(requests["cached_tokens"].sum()
                                 / max(requests.loc[requests["status"] != "rejected", "prompt_tokens"].sum(), 1)),
        "steps": len(steps),
        "mean_prompt_tokens": float(requests["prompt_tokens"].mean()) if n else float("nan"),
        "mean_output_tokens": float(fin["output_tokens"].mean()) if len(fin) else float("nan"),
        "output_tokens": out_tokens,  # of the finished requests (what cost per token divides by)
        "prompt_tokens": int(fin["prompt_tokens"].sum()),
    }
    for col in ("ttft", "tpot", "e2e", "queueing_delay"):
        for k, v in _stats(fin[col]).items():
            summary[f"{col}_{k}"] = v
    if itl is not None:
        names = list(itl["classes"])
        rows = [names.index(c) for c in requests["class"].unique()] if "class" in requests else range(len(names))
        rows = sorted(rows)
        for k, v in itl_stats(itl["hist"][rows].sum(axis=0), int(itl["sum"][rows].sum())).items():
            summary[f"itl_{k}"] = v
    if len(steps):
        busy = steps["duration"].to_numpy()
        summary["mean_batch_size"] = float(np.average(steps["num_seqs"], weights=busy))
        if "decode_seqs" in steps:  # over the steps that decode (prefill-only steps left out)
            decode = steps["decode_seqs"].to_numpy()
            summary["mean_decode_batch"] = float(decode[decode > 0].mean()) if (decode > 0).any() else float("nan")
        if "kv_utilization" in steps:
            summary["mean_kv_utilization"] = float(np.average(steps["kv_utilization"], weights=busy))
    if per_class:
        from sim.results.queue import queue_summary

        summary.update(queue_summary(requests, getattr(workload, "bursts", ())))
        if getattr(workload, "ended_by", None) is not None:
            summary["arrivals_ended_by"] = dict(workload.ended_by)
    classes = requests["class"].unique() if "class" in requests else []
    if per_class and len(classes) > 1:
        summary["classes"] = {
            str(c): summarize(requests[requests["class"] == c], steps.iloc[:0], num_gpus=num_gpus,
                              per_class=False, itl=itl) for c in classes}
    return summary


def ms_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """A table for CSV/JSON output: latency columns in seconds (``ttft_p99``) become
    milliseconds named as ``vllm bench serve`` names them (``p99_ttft_ms``, ``mean_e2e_ms``);
    the other columns stay as they are. (summary.json keeps seconds under the plain keys.)"""
    renames = {c: f"{m[2]}_{m[1]}_ms" for c in frame.columns if isinstance(c, str) and (m := LATENCY_KEY.match(c))}
    if not renames:
        return frame
    out = frame.copy()
    for c in renames:
        out[c] = pd.to_numeric(out[c], errors="coerce") * 1e3
    return out.rename(columns=renames)


def _goodput(met: int, n: int, span: float, duration: float) -> float:
    """SLO-meeting requests per second over the arrival window: attainment × offered rate
    ((n − 1) / span); a single instant of arrivals falls back to first arrival → last completion."""
    if n > 1 and span > 0:
        return met / n * (n - 1) / span
    return met / duration


class InvariantError(RuntimeError):
    """A request record that cannot happen: the simulator is wrong, not the input."""


def check_request_times(table: RequestTable) -> None:
    """Every request's times are in order: arrival ≤ first scheduled ≤ first token ≤ completion
    (for those it reached). Raises InvariantError naming the first request that breaks it."""
    order = (("arrival", table.arrival), ("first_scheduled", table.first_scheduled),
             ("first_token", table.first_token), ("completion", table.completion))
    for (a_name, a), (b_name, b) in itertools.pairwise(order):
        bad = np.flatnonzero(a > b)  # NaN (not reached) compares false
        if bad.size:
            rid = int(bad[0])
            raise InvariantError(f"request {rid}: {a_name} {a[rid]!r} after {b_name} {b[rid]!r} "
                                 f"({bad.size} request(s) so)")
