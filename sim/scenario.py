"""The scenario schema: a typed, validated description of a serving setup and its traffic.

Errors name the file, the field path and what was expected. ``load_scenario`` reads YAML
(or the embedded default), applies ``--set`` overrides and validates.
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.errors import ScenarioError
from sim.memory import MemoryBudget, memory_budget
from sim.specs import GpuSpec, ModelSpec, get_gpu, get_model, model_from_hf_config

Fraction = Annotated[float, Field(gt=0, le=1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- traffic ---------------------------------------------------------------------------------
class PoissonArrivals(Strict):
    process: Literal["poisson"]
    rate: PositiveFloat  # requests per second


class GammaArrivals(Strict):
    """Bursty arrivals: gamma inter-arrival times with a coefficient of variation (1 = Poisson)."""

    process: Literal["gamma"]
    rate: PositiveFloat
    cv: PositiveFloat


class ConstantArrivals(Strict):
    process: Literal["constant"]
    rate: PositiveFloat


class TraceArrivals(Strict):
    """Arrival times replayed from a trace file (lengths come from the length distributions)."""

    process: Literal["trace"]
    path: str
    format: Literal["azure"] = "azure"
    time_scale: PositiveFloat = 1.0  # >1 stretches time (lower rate)
    rate: PositiveFloat | None = None  # rescale to this mean rate


Arrivals = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals,
    Field(discriminator="process"),
]


class FixedLength(Strict):
    dist: Literal["fixed"]
    value: PositiveInt


class UniformLength(Strict):
    dist: Literal["uniform"]
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        return self


class NormalLength(Strict):
    dist: Literal["normal"]
    mean: PositiveFloat
    std: NonNegativeFloat
    min: PositiveInt = 1
    max: PositiveInt | None = None


class LognormalLength(Strict):
    """Lognormal with the given mean and log-space sigma, clipped to [min, max]."""

    dist: Literal["lognormal"]
    mean: PositiveFloat
    sigma: PositiveFloat
    min: PositiveInt = 1
    max: PositiveInt | None = None


class EmpiricalLength(Strict):
    """Lengths drawn (with replacement) from a trace column."""

    dist: Literal["empirical"]
    path: str
    column: Literal["ContextTokens", "GeneratedTokens"]
    format: Literal["azure"] = "azure"


Length = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="dist"),
]


class TraceWorkload(Strict):
    """Arrivals and lengths together, replayed from a trace."""

    path: str
    format: Literal["azure"] = "azure"
    time_scale: PositiveFloat = 1.0
    rate: PositiveFloat | None = None
    start_s: NonNegativeFloat = 0.0
    duration_s: PositiveFloat | None = None


class Workload(Strict):
    num_requests: PositiveInt | None = 1000
    duration_s: PositiveFloat | None = None  # stop generating arrivals after this time
    arrival: Arrivals = PoissonArrivals(process="poisson", rate=4.0)
    prompt_len: Length = LognormalLength(dist="lognormal", mean=512, sigma=0.8, max=4096)
    output_len: Length = LognormalLength(dist="lognormal", mean=192, sigma=0.8, max=1024)
    trace: TraceWorkload | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if self.trace is not None:
            both = {"arrival", "prompt_len", "output_len"} & self.model_fields_set
            if both:
                raise ValueError(f"give either 'trace' or {sorted(both)}, not both")
        if self.num_requests is None and self.duration_s is None and self.trace is None:
            raise ValueError("give num_requests or duration_s")
        return self


# -- the serving system ----------------------------------------------------------------------
class HfConfigModel(Strict):
    hf_config: str  # a config.json, or the folder holding it
    name: str | None = None


class Hardware(Strict):
    gpu: str = "H100-SXM"
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    memory_utilization: Fraction = 0.9
    activation_reserve_gb: NonNegativeFloat | None = None  # None: estimated from the model

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        try:
            return get_gpu(v).name
        except KeyError as e:
            raise ValueError(e.args[0]) from None


class Scheduler(Strict):
    policy: Literal["static", "continuous", "chunked-prefill"] = "continuous"
    max_num_seqs: PositiveInt = 256
    max_batched_tokens: PositiveInt = 8192  # tokens in one step (continuous batching)
    chunk_size: PositiveInt = 512  # token budget of one step (chunked prefill)
    block_size: PositiveInt = 16
    batch_size: PositiveInt = 32  # static batching
    batch_timeout_s: NonNegativeFloat = 0.1  # static batching: longest wait to fill a batch
    watermark: Annotated[float, Field(ge=0, lt=0.5)] = 0.01  # KV blocks kept free at admission

    @model_validator(mode="after")
    def _budget_holds_decodes(self):
        if self.policy == "chunked-prefill" and self.chunk_size < self.max_num_seqs:
            raise ValueError(
                f"chunk_size ({self.chunk_size}) must be ≥ max_num_seqs ({self.max_num_seqs}): "
                "every running request decodes one token of the step's budget")
        return self


class Cost(Strict):
    model: Literal["roofline"] = "roofline"
    compute_efficiency: Fraction = 0.6  # share of peak FLOP/s matmuls reach
    memory_efficiency: Fraction = 0.8  # share of peak HBM bandwidth
    step_overhead_s: NonNegativeFloat = 0.002  # scheduling, launch and sampling per step


class Slo(Strict):
    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None


class Simulation(Strict):
    fast_forward: bool = True  # jump over decode steps where nothing changes


class Scenario(Strict):
    name: str = "scenario"
    seed: int = 0
    model: str | HfConfigModel = "llama-3-8b"
    hardware: Hardware = Hardware()
    replicas: PositiveInt = 1
    scheduler: Scheduler = Scheduler()
    workload: Workload = Workload()
    cost: Cost = Cost()
    slo: Slo = Slo()
    simulation: Simulation = Simulation()

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    @field_validator("model")
    @classmethod
    def _known_model(cls, v):
        if isinstance(v, str):
            try:
                get_model(v)
            except KeyError as e:
                raise ValueError(e.args[0]) from None
        return v

    # Resolved specs; ``base_dir`` is where relative paths in the scenario start from.
    base_dir: str = Field(default=".", exclude=True, repr=False)

    @cached_property
    def model_spec(self) -> ModelSpec:
        if isinstance(self.model, str):
            return get_model(self.model)
        return model_from_hf_config(self.resolve(self.model.hf_config), self.model.name)

    @cached_property
    def gpu_spec(self) -> GpuSpec:
        return get_gpu(self.hardware.gpu)

    @cached_property
    def memory(self) -> MemoryBudget:
        hw, sch = self.hardware, self.scheduler
        step_tokens = sch.chunk_size if sch.policy == "chunked-prefill" else sch.max_batched_tokens
        act = None if hw.activation_reserve_gb is None else hw.activation_reserve_gb * 1024**3
        return memory_budget(
            self.model_spec, self.gpu_spec, tp=hw.tp, pp=hw.pp,
            utilization=hw.memory_utilization, block_size=sch.block_size,
            max_batched_tokens=step_tokens, max_num_seqs=sch.max_num_seqs,
            activation_bytes=act,
        )

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p


DEFAULT_SCENARIO = "default.yaml"


def _set_path(data: dict, dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None or (isinstance(child, str) and key == "model"):
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise ScenarioError(source, ".".join(keys[: i + 1]),
                                f"is a {type(child).__name__}, cannot set {dotted}")
        node = child
    node[keys[-1]] = value


def apply_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """Apply ``field.path=value`` overrides; values are parsed as YAML (``8``, ``true``, ``[1,2]``)."""
    for item in overrides:
        if "=" not in item:
            raise ScenarioError("--set", item, "expected field.path=value")
        dotted, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        _set_path(data, dotted.strip(), value, f"{source} (--set)")
    return data


# pydantic puts the chosen branch of a union into an error's location; users never wrote it.
_UNION_TAGS = {"poisson", "gamma", "constant", "trace", "fixed", "uniform", "normal", "lognormal",
               "empirical", "str", "HfConfigModel"}


def _format_loc(loc: tuple) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif p in _UNION_TAGS or str(p).startswith("function-"):
            continue
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def scenario_from_dict(data: Any, source: str, base_dir: str | Path = ".") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(source, None, f"expected a mapping of fields, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate({**data, "base_dir": str(base_dir)})
    except ValidationError as e:
        err = e.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif "input" in err and err["type"] not in ("missing",):
            msg = f"{msg} (got {err['input']!r})"
        more = f" (and {len(e.errors()) - 1} more problems)" if len(e.errors()) > 1 else ""
        raise ScenarioError(source, _format_loc(err["loc"]), msg + more) from None
    check_feasible(scenario, source)
    return scenario


def check_feasible(s: Scenario, source: str) -> None:
    """Cross-field checks that need the specs: does the model fit at all?"""
    try:
        spec = s.model_spec
    except (OSError, KeyError, ValueError) as e:
        raise ScenarioError(source, "model.hf_config", f"cannot read a model config: {e}") from None
    mem = s.memory
    if mem.num_blocks < 1:
        gib = 1024**3
        raise ScenarioError(
            source, "hardware",
            f"{spec.name} does not fit on {s.gpu_spec.name} with tp={s.hardware.tp}, "
            f"pp={s.hardware.pp}: weights {mem.weight_bytes / gib:.1f} GiB + activations "
            f"{mem.activation_bytes / gib:.1f} GiB per GPU exceed the usable "
            f"{mem.usable_bytes / gib:.1f} GiB; expected more GPUs (tp/pp) or a larger GPU")
    if spec.num_heads % s.hardware.tp or (spec.num_kv_heads % s.hardware.tp and \
            s.hardware.tp % spec.num_kv_heads):
        raise ScenarioError(source, "hardware.tp",
                            f"must divide the model's {spec.num_heads} attention heads")
    if spec.num_layers < s.hardware.pp:
        raise ScenarioError(source, "hardware.pp", f"exceeds the model's {spec.num_layers} layers")


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read a scenario file (or the embedded default when ``path`` is None) and validate it."""
    if path is None:
        source = f"<default scenario {DEFAULT_SCENARIO}>"
        text = resources.files("sim.data").joinpath(DEFAULT_SCENARIO).read_text()
        base_dir: Path = Path.cwd()
    else:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise ScenarioError(source, None, "no such scenario file")
        text = path.read_text()
        base_dir = path.parent
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ScenarioError(source, None, f"not valid YAML ({where}): {getattr(e, 'problem', e)}") \
            from None
    data = {} if data is None else data
    if overrides:
        if not isinstance(data, dict):
            raise ScenarioError(source, None, "expected a mapping of fields")
        data = apply_overrides(data, overrides, source)
    return scenario_from_dict(data, source, base_dir)
