"""Comparing an engine run with its simulation: per-request errors, summaries, steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

METRICS = ("ttft", "tpot", "e2e")
STATS = ("median", "p90", "max")
SUMMARY_KEYS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99",
                "request_throughput", "output_token_throughput", "goodput", "slo_attainment",
                "duration_s", "mean_batch_size")


def relative_errors(real: pd.Series, sim: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """|sim − real| / real and (sim − real) / real, where both are known."""
    r, s = real.to_numpy(dtype=float), sim.to_numpy(dtype=float)
    ok = np.isfinite(r) & np.isfinite(s) & (r > 0)
    return np.abs(s[ok] - r[ok]) / r[ok], (s[ok] - r[ok]) / r[ok]


def error_stats(joined: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Median, p90 and max of each metric's relative error; ``bias``: the signed median."""
    out = {}
    for m in METRICS:
        err, signed = relative_errors(joined[f"{m}_real"], joined[f"{m}_sim"])
        if not len(err):
            out[m] = {"n": 0, **{s: float("nan") for s in STATS}, "bias": float("nan")}
            continue
        out[m] = {"n": len(err), "median": float(np.median(err)),
                  "p90": float(np.percentile(err, 90)), "max": float(err.max()),
                  "bias": float(np.median(signed))}
    return out


def join(real: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """Requests finished in both runs, side by side (``*_real``, ``*_sim``)."""
    cols = ["request_id", "arrival", "prompt_tokens", "output_tokens", "status", "ttft", "tpot",
            "e2e", "queueing_delay", "preemptions"]
    j = real[cols].merge(sim[cols], on="request_id", suffixes=("_real", "_sim"))
    both = (j["status_real"] == "finished") & (j["status_sim"] == "finished")
    return j[both].reset_index(drop=True)


def summary_diff(real: dict, sim: dict) -> dict[str, dict[str, float]]:
    """Each summary metric in both runs, their difference and relative difference."""
    out = {}
    for k in SUMMARY_KEYS:
        r, s = real.get(k), sim.get(k)
        if r is None or s is None:
            continue
        r, s = float(r), float(s)
        out[k] = {"real": r, "sim": s, "diff": s - r,
                  "rel_diff": (s - r) / r if r else float("nan")}
    return out


def step_errors(cost, shapes, durations: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """The cost model against the engine's own steps (same plans, so no scheduling drift)."""
    if not shapes:
        return {"n": 0}, np.zeros(0)
    pred = np.array([float(cost.step_time(s)) for s in shapes])
    err = pred / durations - 1.0
    kinds = np.array([_kind(s) for s in shapes])
    out = {"n": len(shapes), "median_abs": float(np.median(np.abs(err))),
           "p90_abs": float(np.percentile(np.abs(err), 90)), "bias": float(np.median(err)),
           "total_real_s": float(durations.sum()), "total_sim_s": float(pred.sum())}
    for k in ("decode", "prefill", "mixed"):
        m = kinds == k
        if m.any():
            out[f"{k}_n"] = int(m.sum())
            out[f"{k}_bias"] = float(np.median(err[m]))
            out[f"{k}_median_abs"] = float(np.median(np.abs(err[m])))
    return out, pred


def _kind(s) -> str:
    if not s.prefill_tokens:
        return "decode"
    return "prefill" if not s.decode_seqs else "mixed"


def bounds_exceeded(errors: dict, bounds: dict[str, float]) -> list[str]:
    """``bounds`` maps ``metric`` (its median) or ``metric.stat`` to the largest allowed error."""
    out = []
    for key, limit in bounds.items():
        metric, _, stat = key.partition(".")
        value = errors.get(metric, {}).get(stat or "median")
        if value is None or not np.isfinite(value) or value > limit:
            out.append(f"{metric} {stat or 'median'} error {value if value is None else f'{value:.1%}'} "
                       f"exceeds {limit:.1%}")
    return out
