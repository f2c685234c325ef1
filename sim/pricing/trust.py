"""How far to trust a run's figures: the error band of each headline metric.

- Roofline pricing: the median |error| of the held-out published cases nearest to the run
  (``sim/scenario/data/error_bands.yaml``, written by ``benchmarks/published.py --write-bands``).
  Nearest means the same GPU, engine preset, weight dtype, model kind and metric; with fewer than
  ``MIN_CASES`` such cases, the GPU's architecture instead of the GPU, then any dtype, then any
  engine. The architecture and the model kind are never given up: a GPU defined in the scenario,
  an architecture or a model kind without published cases is "not validated".
- Profile pricing: the validation recorded in the profile (``servesim validate`` writes it), or
  "not validated" when it records none.

The band is a typical error, not a bound: half of the cases it stands on were off by more.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml

from sim.scenario.engines import fitted as engine_fitted

FILE = "error_bands.yaml"
METRICS = ("ttft", "tpot", "e2e", "throughput")  # the benchmark's families: ttft, itl-tpot, e2e, throughput
LABELS = {"ttft": "TTFT", "tpot": "TPOT/ITL", "e2e": "E2E", "throughput": "throughput"}
FAMILY = {"ttft": "ttft", "itl-tpot": "tpot", "e2e": "e2e", "throughput": "throughput"}
MIN_CASES = 3  # fewer cases than this at one level of closeness: look one level broader
ENGINE_LABELS = {"vllm": "vLLM V1", "vllm-v0": "vLLM V0", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM 1.x",
                 "tensorrt-llm-0.x": "TensorRT-LLM 0.x", "lmdeploy": "LMDeploy", "llama.cpp": "llama.cpp"}
ARCH_LABELS = {"cdna3": "CDNA3", "cdna4": "CDNA4"}  # else capitalized: Hopper, Ampere, ...
# the keys a case must share with the run (and the metric), from nearest to broadest
LEVELS = (("gpu", "engine", "dtype", "model"), ("arch", "engine", "dtype", "model"),
          ("arch", "engine", "model"), ("arch", "model"))
# the scenario's replacements of fitted constants (the published cases ran with the fitted ones)
OVERRIDES = ("compute_efficiency", "memory_efficiency", "step_overhead_s")


def dtype_group(weights: str | None, model) -> str:
    """The weights' dtype as the bands group it: 16-bit formats together; unset, the model's own
    (``checkpoint`` where its checkpoint quantizes some tensor groups)."""
    if weights is None:
        weights = "checkpoint" if model.weight_dtypes else model.dtype
    return "bf16/fp16" if weights in ("bf16", "fp16") else weights


def model_kind(model) -> str:
    """dense, moe, mla-moe (MLA attention), or hybrid (linear attention or Mamba layers)."""
    kinds = set(model.layer_attention)
    if model.mamba is not None or model.linear_attention is not None or kinds & {"linear", "mamba"}:
        return "hybrid"
    moe = model.num_experts > 1
    if model.mla is not None:
        return "mla-moe" if moe else "mla"
    return "moe" if moe else "dense"


@cache
def table() -> dict:
    """The shipped held-out errors: ``written`` (command, date) and ``cases`` (one row each)."""
    data = yaml.safe_load(resources.files("sim.scenario.data").joinpath(FILE).read_text())
    cols = data["columns"]
    data["cases"] = [dict(zip(cols, row, strict=True)) for row in data["cases"]]
    return data


def _r4(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


GROUP = ("gpu", "engine", "dtype", "model", "metric")


def summary_rows(cases: list[dict]) -> list[list]:
    """For readers of the bands file: per GPU, engine, dtype, model kind and metric family, the
    median |error| (4 decimals) and the number of held-out cases (a run's band is computed from
    the cases themselves, since a broader match needs the median of their union)."""
    groups: dict[tuple, list[float]] = {}
    for c in cases:
        groups.setdefault(tuple(c[k] for k in GROUP), []).append(abs(c["error"]))
    return [[*k, round(statistics.median(v), 4), len(v)] for k, v in sorted(groups.items())]


@dataclass(frozen=True)
class Band:
    """One metric's band: ``error`` (median |relative error|, None: not validated), the cases
    or requests it stands on, and in words what it stands on."""

    metric: str
    error: float | None
    cases: int
    basis: str
    bias: float | None = None  # the median signed error (+: servesim predicts too high)

    @property
    def text(self) -> str:
        if self.error is None:
            return f"{LABELS[self.metric]} not validated ({self.basis})"
        return f"{LABELS[self.metric]} ±{self.error:.0%} ({self.basis})"

    @property
    def short(self) -> str:
        return f"{LABELS[self.metric]} " + ("not validated" if self.error is None else f"±{self.error:.0%}")

    def to_json(self) -> dict:
        return {"error": _r4(self.error), "cases": self.cases, "bias": _r4(self.bias), "basis": self.basis,
                "text": self.text}


@dataclass
class ErrorBand:
    cost_model: str
    bands: dict[str, Band]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"cost_model": self.cost_model, "metrics": {m: b.to_json() for m, b in self.bands.items()},
                "notes": self.notes}

    def short(self) -> str:
        """"TTFT ±20%, TPOT/ITL ±7%, E2E not validated, throughput ±12%"."""
        return ", ".join(b.short for b in self.bands.values()) or "; ".join(self.notes)


def _label(level: tuple[str, ...], want: dict, cases: list[dict]) -> str:
    """"H100-SXM / vLLM / fp8 / dense", "Hopper (H100-SXM, H200) / dense, any engine and dtype"."""
    parts = []
    for k in ("gpu", "arch", "engine", "dtype", "model"):
        if k not in level:
            continue
        if k == "arch":
            parts.append(f"{arch_label(want['arch'])} ({', '.join(sorted({c['gpu'] for c in cases}))})")
        else:
            parts.append(ENGINE_LABELS.get(want[k], want[k]))
    anything = " and ".join(k for k in ("engine", "dtype") if k not in level)
    return " / ".join(parts) + (f", any {anything}" if anything else "")


def arch_label(arch: str) -> str:
    return ARCH_LABELS.get(arch, arch.capitalize())


def roofline_band(metric: str, want: dict) -> Band:
    """The band of ``metric`` for a run on ``want`` (gpu, arch, engine, dtype, model kind)."""
    rows = [r for r in table()["cases"] if FAMILY[r["metric"]] == metric]
    near = [r for r in rows if r["arch"] == want["arch"] and r["model"] == want["model"]]
    if not near:
        return Band(metric, None, 0, f"no published {LABELS[metric]} case on {arch_label(want['arch'])} GPUs "
                    f"with a {want['model']} model")
    tried = []
    for level in LEVELS:
        cases = [r for r in near if all(r[k] == want[k] for k in level)]
        if len(cases) >= MIN_CASES:
            errors = [r["error"] for r in cases]
            basis = (f"median held-out error of {len(cases)} published cases, {_label(level, want, cases)}"
                     + (f"; fewer than {MIN_CASES} on {tried[0]}" if tried else ""))
            return Band(metric, statistics.median(abs(e) for e in errors), len(cases), basis,
                        statistics.median(errors))
        tried.append(_label(level, want, cases or near))
    return Band(metric, None, len(near), f"only {len(near)} published {LABELS[metric]} case"
                f"{'s' * (len(near) != 1)} on {tried[-1]}")


def _replica_keys(scenario) -> list[dict | str]:
    """Each distinct replica's keys, or why it has none (a GPU defined in the scenario)."""
    model = scenario.model_spec
    out: list[dict | str] = []
    for r in scenario.replica_specs:
        hw = r.hardware
        if not isinstance(hw.gpu, str):
            why = f"the GPU {hw.gpu_name} is defined in the scenario: no published case ran on it"
            keys: dict | str = why
        elif not engine_fitted(scenario.engine.name):
            keys = f"the engine {scenario.engine.name} has no published case: its overheads are not fitted"
        else:
            keys = {"gpu": hw.gpu_name, "arch": hw.gpu_spec.arch, "engine": scenario.engine.name,
                    "dtype": dtype_group(scenario.quantization.weights, model), "model": model_kind(model)}
        if keys not in out:
            out.append(keys)
    return out


def _widest(bands: list[Band]) -> Band:
    """Of the bands of several replicas' GPUs, the least trusted."""
    unknown = [b for b in bands if b.error is None]
    return unknown[0] if unknown else max(bands, key=lambda b: b.error)



def error_band(scenario, cost=None) -> ErrorBand:
    """The error band of each headline metric of a run of ``scenario`` (priced by ``cost``, the
    cost model in use, when given; else the scenario's)."""
    profile = getattr(cost, "profile", None)
    if profile is not None or scenario.cost.model == "profile":
        return profile_band(scenario, profile)
    bands = {}
    for m in METRICS:
        found = [Band(m, None, 0, k) if isinstance(k, str) else roofline_band(m, k) for k in _replica_keys(scenario)]
        bands[m] = _widest(found)
    notes = [f"cost.{f} set by the scenario: the cases were scored with the fitted value"
             for f in OVERRIDES if getattr(scenario.cost, f) is not None]
    notes += [f"engine.{f} set by the scenario: the cases were scored with the preset's"
              for f in sorted(scenario.engine.model_fields_set - {"name"})]
    unmatched = [what for what, used in (
        ("disaggregation", scenario.disaggregation is not None),
        ("pipeline parallelism", any(r.hardware.pp > 1 for r in scenario.replica_specs)),
        ("speculative decoding", any(r.scheduler.speculative is not None for r in scenario.replica_specs)))
        if used]
    if unmatched:
        notes.append(f"no published case uses {' or '.join(unmatched)}: the band covers the step costs alone")
    return ErrorBand("roofline", bands, notes)


def profile_band(scenario, profile=None) -> ErrorBand:
    """The validation the profile records (``servesim validate``), or "not validated"."""
    from sim.pricing.profile import load_profile

    path = scenario.cost.profile
    if profile is None:
        profile = load_profile(scenario.resolve(path))
    v = profile.validation
    if v is None:
        why = f"the profile {path} records no validation: run servesim validate with it"
        return ErrorBand("profile", {m: Band(m, None, 0, why) for m in METRICS})
    bands = {}
    for m in METRICS:
        if m not in v.errors:
            bands[m] = Band(m, None, 0, f"the validation of {v.created[:10]} did not measure it")
            continue
        what = "the run's" if m == "throughput" else f"median per-request error over {v.requests:,} requests"
        bands[m] = Band(m, v.errors[m], v.requests, f"{what}, validated against {v.against} on "
                        f"{v.created[:10]} ({v.scenario})", v.bias.get(m))
    return ErrorBand("profile", bands)
