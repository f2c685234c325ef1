"""The profiled cost model: step times from measured operation costs.

Reads a calibration profile and prices a step either with the whole-step fit (when the
profile has one, unless its ``prefer`` says ``ops``) or by adding up the per-operation tables
and fits. Outside the measured range a table extrapolates with the roofline's shape (the
measured edge value scaled by the roofline's ratio) and a fit continues linearly; either is
counted, so the run can warn. Vectorised like the roofline.
"""

from __future__ import annotations

import numpy as np

from sim.core.plan import StepShape
from sim.pricing.profile import LinearFit, Profile, Table
from sim.pricing.roofline import RooflineCost


class ProfiledCost:
    def __init__(self, profile: Profile, roofline: RooflineCost, mode: str = "auto"):
        self.profile = profile
        self.roofline = roofline
        if mode == "auto":
            mode = profile.prefer or ("step" if profile.step is not None else "ops")
        self.mode = mode
        self.overhead = profile.overhead_s
        self.extrapolated: dict[str, int] = {}
        self.draft = None

    # -- building blocks ---------------------------------------------------------------------
    def _count(self, what: str, n: int) -> None:
        if n:
            self.extrapolated[what] = self.extrapolated.get(what, 0) + int(n)

    def _table(self, name: str, table: Table, x, shape_at) -> np.ndarray:
        """Interpolate; beyond the last point follow the roofline: t(x) = t(x_max)·r(x)/r(x_max)."""
        x = np.asarray(x, dtype=float)
        xs, ys = np.asarray(table.x), np.asarray(table.seconds)
        t = np.interp(x, xs, ys)
        beyond = x > xs[-1]
        if np.any(beyond):
            self._count(name, np.count_nonzero(beyond))
            ratio = shape_at(np.where(beyond, x, xs[-1])) / shape_at(xs[-1])
            t = np.where(beyond, ys[-1] * ratio, t)
        return t

    def _fit(self, name: str, fit: LinearFit, values: dict) -> np.ndarray:
        total = 0.0
        for feature, coef in zip(fit.features, fit.coef, strict=True):
            v = 1.0 if feature == "const" else np.asarray(values[feature], dtype=float)
            if feature in fit.ranges and feature != "const":
                hi = fit.ranges[feature][1]
                self._count(f"{name}.{feature}", np.count_nonzero(np.asarray(v) > hi * 1.001))
            total = total + coef * v
        return np.maximum(total, 0.0)

    # -- pricing -----------------------------------------------------------------------------
    def op_times(self, s: StepShape) -> dict[str, np.ndarray]:
        ops, roof = self.profile.ops, self.roofline
        tokens = np.asarray(s.num_tokens, dtype=float)
        rows = np.asarray(s.num_seqs, dtype=float) - np.asarray(s.decode_seqs, dtype=float)

        def roof_op(*names):
            def at(x):
                shape = StepShape(x, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
                ot = roof.op_times(shape)
                return sum(np.asarray(ot[n]) for n in names if n in ot)
            return at

        times = {"linear": self._table("linear", ops.linear, tokens,
                                       roof_op("qkv_proj", "o_proj", "mlp", "moe_mlp"))}
        times["other"] = (self._table("other", ops.other, tokens, roof_op("norms_and_rest"))
                          if ops.other else roof.op_times(s)["norms_and_rest"])
        sampled = np.asarray(s.num_sampled, dtype=float)
        if ops.lm_head:
            times["lm_head"] = np.where(sampled > 0, self._table(
                "lm_head", ops.lm_head, np.maximum(sampled, ops.lm_head.x[0]),
                lambda x: roof.op_times(StepShape(x, x, 0.0, 0.0, 0.0, 0.0, x))["lm_head"]), 0.0)
        else:
            times["lm_head"] = roof.op_times(s)["lm_head"]
        values = {"prefill_rows": rows, "prefill_attn": s.prefill_attn,
                  "decode_rows": s.decode_seqs, "decode_context": s.decode_context}
        times["attn_prefill"] = np.where(np.asarray(s.prefill_tokens) > 0, self._fit(
            "attn_prefill", ops.attn_prefill, values), 0.0) if ops.attn_prefill else \
            roof.op_times(s)["attn_prefill"]
        times["attn_decode"] = np.where(np.asarray(s.decode_seqs) > 0, self._fit(
            "attn_decode", ops.attn_decode, values), 0.0) if ops.attn_decode else \
            roof.op_times(s)["attn_decode"]
        if roof.tp > 1:
            act = tokens * roof.model.hidden_size * roof.abytes
            if ops.allreduce:
                one = self._table("allreduce", ops.allreduce, act, lambda b: b)
                times["allreduce"] = 2 * roof.model.num_layers * one
            else:
                times["allreduce"] = roof.op_times(s)["allreduce"]
        return times

    def step_time(self, s: StepShape) -> np.ndarray | float:
        # sim/compiled/kernel.py's price restates this (same terms, same order, same counts).
        if self.mode == "step":
            values = {"num_tokens": s.num_tokens, "prefill_attn": s.prefill_attn,
                      "decode_context": s.decode_context, "num_seqs": s.num_seqs,
                      "num_sampled": s.num_sampled}
            total = self._fit("step", self.profile.step, values) + self.overhead
        else:
            total = sum(self.op_times(s).values()) + self.overhead
        return total if np.ndim(total) else float(total)

    def uncount(self, s: StepShape) -> None:
        """Take back the extrapolation counts of steps priced but never run (a fast-forwarded
        stretch of decode steps cut short by an arrival), so that counts are per step run."""
        before = dict(self.extrapolated)
        self.step_time(s)
        for what, now in list(self.extrapolated.items()):
            kept = before.get(what, 0) - (now - before.get(what, 0))
            if kept:
                self.extrapolated[what] = kept
            else:
                del self.extrapolated[what]

    def warnings(self) -> list[str]:
        how = {True: "continuing its linear fit", False: "following the roofline's shape"}
        return [f"cost profile extrapolated beyond its measured range ({what}) in {n} step(s), "
                f"{how['.' in what]}" for what, n in sorted(self.extrapolated.items())]
