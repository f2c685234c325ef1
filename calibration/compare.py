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


def spread(first: pd.DataFrame, second: pd.DataFrame) -> dict[str, dict[str, float]]:
    """How far a second measured run of the same requests is from the first, per request
    (``|second − first| / first``): the measurement's own noise, to set an error beside."""
    return error_stats(join(first, second))


def breakdown(real: dict[str, float], sim: dict[str, float]) -> dict[str, dict[str, float]]:
    """Mean seconds per request waiting (arrival → first scheduled: queueing, plus an
    endpoint's per-request overhead), in prefill (→ first token) and decoding (→ last token),
    measured and simulated, and the difference as a share of the measured mean E2E."""
    e2e = real.get("e2e_s") or float("nan")
    out = {}
    for k in ("wait_s", "prefill_s", "decode_s", "e2e_s"):
        r, s = real.get(k), sim.get(k)
        if r is None or s is None:
            continue
        out[k.removesuffix("_s")] = {"real": r, "sim": s, "diff": s - r, "share_of_e2e": (s - r) / e2e}
    return out


def diagnose(errors: dict, spread_: dict, stages: dict, tolerance: float = 0.05) -> list[str]:
    """Which part of the prediction is off: per metric, the error beside the measurement's
    own spread; per stage, what its difference adds to the mean E2E."""
    out = []
    for m in METRICS:
        e = errors.get(m, {}).get("median")
        sp = spread_.get(m, {}).get("median")
        if e is None or not np.isfinite(e):
            continue
        noise = f" (two measured runs differ by {sp:.1%})" if sp is not None and np.isfinite(sp) else ""
        bias = errors[m].get("bias", 0.0)
        side = "over" if bias > 0 else "under"
        out.append(f"{m.upper()}: median error {e:.1%}, simulator {side}-predicts (bias {bias:+.1%}){noise}")
    parts = [(k, d) for k, d in stages.items() if k != "e2e" and np.isfinite(d.get("share_of_e2e", np.nan))]
    parts.sort(key=lambda kd: -abs(kd[1]["share_of_e2e"]))
    for k, d in parts:
        if abs(d["share_of_e2e"]) >= tolerance / 2:
            out.append(f"{k}: simulated {d['sim'] * 1e3:.0f} ms vs measured {d['real'] * 1e3:.0f} ms per "
                       f"request ({d['share_of_e2e']:+.1%} of E2E)")
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


def parse_bounds(items: list[str]) -> dict[str, float]:
    """``--max-error``: ``0.3`` bounds every metric's median; ``e2e=0.05`` or ``ttft.p90=0.2``
    one statistic."""
    from sim.errors import InputError

    out: dict[str, float] = {}
    for item in items:
        key, _, raw = item.rpartition("=")
        try:
            limit = float(raw)
        except ValueError:
            raise InputError("--max-error", item, "expected a number, METRIC=X or METRIC.STAT=X") \
                from None
        if limit < 0:
            raise InputError("--max-error", item, "must be ≥ 0")
        for k in [key] if key else list(METRICS):
            metric, _, stat = k.partition(".")
            if metric not in METRICS or (stat and stat not in STATS):
                raise InputError("--max-error", item,
                                 f"metric must be one of {', '.join(METRICS)}, optionally "
                                 f".{'/.'.join(STATS)}")
            out[k] = limit
    return out


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
