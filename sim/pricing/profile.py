"""The calibration profile: measured operation costs of one model on one device.

Written by ``servesim calibrate`` (the engine, timed) or by the Vidur importer; read by the
profiled cost model. JSON, versioned and validated on load: errors name the file and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import ProfileError

SCHEMA_VERSION = 1
STEP_FEATURES = ("const", "num_tokens", "prefill_attn", "decode_context", "num_seqs", "num_sampled")
# Not a feature: in a step fit, the terms listed before ``floor`` add up to at least its coefficient
# (seconds) — a step that cannot run faster than, say, reading the weights once (the roofline's
# max(memory, compute)); the terms after it add on top.
FLOOR = "floor"
ATTN_FEATURES = ("const", "prefill_rows", "prefill_attn", "decode_rows", "decode_context")
DROP = 0.5  # a table's time may dip with noise, not fall below this share of an earlier one
CANCEL = 0.5  # a fit's negative terms may take off at most this share of its positive ones


class Strict(BaseModel):
    # Numbers must be numbers (no true for 1), finite; read from JSON (arrays for pairs).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Table(Strict):
    """Seconds as a function of one size (interpolated piecewise-linearly)."""

    x: list[float] = Field(min_length=2)
    seconds: list[float]

    @model_validator(mode="after")
    def _shape(self):
        if len(self.x) != len(self.seconds):
            raise ValueError(f"x has {len(self.x)} points but seconds has {len(self.seconds)}")
        if any(b <= a for a, b in zip(self.x, self.x[1:], strict=False)):
            raise ValueError("x must be strictly increasing")
        if any(not np.isfinite(s) or s < 0 for s in self.seconds):
            raise ValueError("seconds must be finite and ≥ 0")
        return self


class LinearFit(Strict):
    """seconds = Σ coef·feature, fitted by least squares on measurements; ``ranges`` holds each
    feature's measured [min, max] so that extrapolation can be reported."""

    features: list[str] = Field(min_length=1)
    coef: list[float]
    r2: float = Field(ge=-1, le=1)
    ranges: dict[str, tuple[float, float]] = {}

    @model_validator(mode="after")
    def _shape(self):
        if len(self.features) != len(self.coef):
            raise ValueError("features and coef differ in length")
        if len(set(self.features)) != len(self.features):
            raise ValueError(f"features repeat: {self.features}")
        return self


class Ops(Strict):
    linear: Table  # all matmuls of the model (QKV, O, MLP; embedding) by new tokens in the step
    other: Table | None = None  # norms, rotary, KV writes, activations, residual adds: by tokens
    lm_head: Table | None = None  # LM head + sampling by rows that sample
    attn_prefill: LinearFit | None = None  # features: prefill_rows, prefill_attn (Σ q·kv)
    attn_decode: LinearFit | None = None  # features: decode_rows, decode_context (Σ kv)
    allreduce: Table | None = None  # one all-reduce by bytes (TP > 1)

    @model_validator(mode="after")
    def _known_features(self):
        for name in ("attn_prefill", "attn_decode"):
            fit = getattr(self, name)
            if fit is not None and not set(fit.features) <= {*ATTN_FEATURES}:
                unknown = sorted(set(fit.features) - {*ATTN_FEATURES})
                raise ValueError(f"{name} fit has unknown features {unknown} (known: {list(ATTN_FEATURES)})")
        return self


class Device(Strict):
    name: str
    type: Literal["cpu", "cuda", "gpu"]


class ValidationRecord(Strict):
    """What ``servesim validate`` measured with the profile (the last validation): the median
    per-request |sim − real| / real of TTFT, TPOT and E2E, and the run's output-throughput error."""

    created: str  # ISO time
    against: str  # what ran for real: the engine on a device, or an endpoint
    scenario: str
    requests: int = Field(ge=1)  # requests finished in both runs
    errors: dict[Literal["ttft", "tpot", "e2e", "throughput"], Annotated[float, Field(ge=0)]]
    bias: dict[Literal["ttft", "tpot", "e2e", "throughput"], float] = {}  # signed medians (+: sim slower/higher)


class Profile(Strict):
    schema_version: Literal[1]
    kind: Literal["servesim-profile"] = "servesim-profile"
    source: str
    created: str
    device: Device
    model: str
    model_shape: dict[str, int]
    dtype: str
    tp: int = Field(ge=1, default=1)
    engine: str | None = None  # the serving engine measured (a scenario's engine.name), where known
    versions: dict[str, str] = {}
    grid: dict = {}
    ops: Ops
    step: LinearFit | None = None  # whole-step fit: the preferred model when present
    prefer: Literal["step", "ops"] | None = None  # overrides that choice (calibrate's verdict)
    overhead_s: float = Field(ge=0, default=0.0)  # per step, outside the forward
    # Per request, outside the steps (an endpoint's HTTP/API path: tokenising, queueing into
    # the engine, streaming the first token back): added to TTFT and E2E, not to TPOT. The
    # request reaches the scheduler this long after it was sent. 0 changes nothing.
    request_overhead_s: float = Field(ge=0, default=0.0)
    notes: list[str] = []
    validation: ValidationRecord | None = None  # written by servesim validate; the run's error band

    @model_validator(mode="after")
    def _preferred_exists(self):
        if self.prefer == "step" and self.step is None:
            raise ValueError("prefer is 'step' but the profile has no step fit")
        if self.step is not None and not set(self.step.features) <= {*STEP_FEATURES, FLOOR}:
            unknown = sorted(set(self.step.features) - {*STEP_FEATURES, FLOOR})
            raise ValueError(f"step fit has unknown features {unknown} (known: {[*STEP_FEATURES, FLOOR]})")
        if self.step is not None and FLOOR in self.step.features:
            if self.step.features.index(FLOOR) == 0:
                raise ValueError("step fit: floor must follow the terms it bounds from below")
            if self.step.coef[self.step.features.index(FLOOR)] < 0:
                raise ValueError("step fit: floor must be ≥ 0 seconds")
        return self



def load_profile(path: str | Path, field: str = "cost.profile") -> Profile:
    from sim.inputs import read_text

    path = Path(path)
    if not path.exists():
        raise ProfileError(str(path), field, "profile file not found (make one with servesim calibrate)")
    text = read_text(path, field, ProfileError, "profile")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(str(path), None, f"not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ProfileError(str(path), None, "expected a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ProfileError(str(path), "schema_version",
                           f"expected {SCHEMA_VERSION}, got {version!r} (re-run servesim calibrate)")
    try:
        profile = Profile.model_validate_json(text)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ProfileError(str(path), loc, err["msg"].removeprefix("Value error, ")) from None
    check_fits(profile, str(path))
    return profile


def save_profile(profile: Profile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.model_dump(mode="json"), indent=1))
    return path


# -- what a profile prices with must price a step -------------------------------------------
# A least-squares fit whose negative coefficients cancel most of a step's time (pricing clamps at
# 0 s), or whose coefficients are all zero, would make steps nearly free without a word; a table
# whose times fall steeply as the size grows is not a measurement of one operation.
def fit_range(fit: LinearFit) -> tuple[float, float, float, float]:
    """Over the fit's measured ranges (a feature without a range: from 0 to unbounded), the least
    and the most seconds it gives (a ``floor`` raises the sum so far, as in pricing), and, where it
    gives the least, what its positive and its negative terms add up to."""
    lo = hi = pos = neg = 0.0
    for feature, coef in zip(fit.features, fit.coef, strict=True):
        if feature == FLOOR:
            lo, hi = max(lo, coef), max(hi, coef)
            continue
        a, b = (1.0, 1.0) if feature == "const" else fit.ranges.get(feature, (0.0, math.inf))
        ends = (coef * a, coef * b if coef else 0.0)
        least = min(ends)
        lo, hi = lo + least, hi + max(ends)
        pos, neg = (pos + least, neg) if least >= 0 else (pos, neg - least)
    return lo, hi, pos, neg


def _fit_problem(name: str, fit: LinearFit) -> str | None:
    for feature, coef in zip(fit.features, fit.coef, strict=True):
        if coef < 0 and feature not in fit.ranges and feature not in ("const", FLOOR):
            return (f"{name} fit: the coefficient of {feature} is negative ({coef:g}) and the profile records no "
                    f"measured range for it, so its steps could cost nothing; refit with non-negative coefficients")
    lo, hi, pos, neg = fit_range(fit)
    if hi <= 0:
        return (f"{name} fit: every coefficient is zero or negative ({fit.coef}): a step would take no time; "
                "the measurements behind it are missing or broken")
    if neg > CANCEL * pos:
        negative = ", ".join(f"{f} {c:g}" for f, c in zip(fit.features, fit.coef, strict=True) if c < 0)
        return (f"{name} fit: negative coefficients ({negative}) make it predict {max(lo, 0):.3g} s within its "
                f"measured ranges, cancelling {neg / pos if pos else 1:.0%} of the step's time (at most "
                f"{CANCEL:.0%} is plausible); refit with non-negative coefficients")
    return None


def _table_problem(name: str, table: Table) -> str | None:
    secs = table.seconds
    if max(secs) <= 0:
        return f"{name}: every time is 0 s; the measurements behind it are missing"
    top, at = secs[0], table.x[0]
    for x, s in zip(table.x, secs, strict=True):
        if s < DROP * top:
            return (f"{name}: the time falls from {top:.3g} s at {at:g} to {s:.3g} s at {x:g}: not monotone in "
                    "the size; re-measure (a larger step cannot take less than half the time of a smaller one)")
        if s > top:
            top, at = s, x
    return None


def check_fits(profile: Profile, path: str, mode: str | None = None) -> None:
    """Refuse (``ProfileError`` naming the field) a profile whose pricing model, the step fit or
    the per-operation tables and fits (``mode``; default: the one it prices with), cannot give
    a positive step time over its measured range."""
    mode = mode or profile.prefer or ("step" if profile.step is not None else "ops")
    if mode == "step" and profile.step is not None:
        why = _fit_problem("step", profile.step)
        if why:
            raise ProfileError(path, "step.coef", why)
        return
    ops = profile.ops
    for name in ("linear", "other", "lm_head", "allreduce"):
        table = getattr(ops, name)
        why = table and _table_problem(name, table)
        if why:
            raise ProfileError(path, f"ops.{name}.seconds", why)
    for name in ("attn_prefill", "attn_decode"):
        fit = getattr(ops, name)
        why = fit and _fit_problem(name, fit)
        if why:
            raise ProfileError(path, f"ops.{name}.coef", why)
