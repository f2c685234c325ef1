"""Expanding a study into configurations, each validated up front, and keying its runs."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from sim.errors import InputError, ScenarioError
from sim.results.money import cost_per_hour, gpu_inventory, own_prices
from sim.scenario.load import paths_from, read_scenario_file, scenario_from_dict
from sim.scenario.schema import Scenario
from sim.study.intervals import seed_for
from sim.study.overrides import apply, canonical, get_path, set_path, short_names, show
from sim.study.schema import Curves, MaxRate, Study, StudyError

KEY_VERSION = 1


@dataclass(frozen=True)
class Config:
    """One point of the study's grid: its overrides and the scenario mapping they give."""

    index: int
    label: str
    values: dict[str, Any]  # swept field -> value ("case" for a named case)
    sources: dict[str, str]  # override path -> where the study file sets it
    data: dict  # the scenario mapping with every override applied (rate not yet)
    rate_field: str | None
    gpus: dict[str, int]
    cost_per_hour: float
    skipped: str | None = None  # why it cannot run (infeasible: skip), or None

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus.values())


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs to run one simulation (picklable, no open files)."""

    key: str
    config: int
    rate: float | None
    data: dict = field(repr=False)
    base_dir: str = "."
    source: str = "study"
    keep_requests: bool = False


@dataclass
class Plan:
    study: Study
    source: str  # the study file
    scenario_path: Path
    base_dir: Path
    name: str
    configs: list[Config]
    swept: list[str]  # the swept fields, in order ("case" first when there are cases)
    seeds: int = 1  # runs per configuration and rate (the study's seeds, or --seeds)

    def spec(self, config: Config, rate: float | None, seed: int = 0) -> RunSpec:
        """The run of ``config`` at ``rate`` on replication ``seed`` (0: the scenario's own seed,
        k: its seed + k, ``intervals.seed_for``)."""
        data = config.data
        if rate is not None and config.rate_field:
            data = apply(data, {config.rate_field: rate}, self.source, "objective")
        if seed:
            data = apply(data, {"seed": self.seed_of(config, seed)}, self.source, "seeds")
        return RunSpec(run_key(data), config.index, rate, data, str(self.base_dir),
                       f"{self.source} [{config.label}]")


    def seed_of(self, config: Config, k: int) -> int:
        """The scenario seed of replication ``k`` of ``config``."""
        return seed_for(config.data.get("seed", Scenario.model_fields["seed"].default), k)


def run_key(data: dict) -> str:
    """A run's stable identity: the hash of its fully overridden scenario and its seed."""
    seed = data.get("seed", Scenario.model_fields["seed"].default)
    text = canonical({"v": KEY_VERSION, "scenario": data, "seed": seed})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def has_field(model: type[BaseModel], dotted: str) -> bool:
    """Whether a pydantic model (e.g. Scenario) has the field ``a.b.c``, looking through
    optional and union annotations."""
    head, _, rest = dotted.partition(".")
    info = model.model_fields.get(head)
    if info is None:
        return False
    if not rest:
        return True
    todo, seen = [info.annotation], []
    while todo:  # unwrap Optional[...], unions, Annotated[...], list[...]
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            seen.append(t)
        todo.extend(get_args(t))
    return any(has_field(m, rest) for m in seen)


def read_scenario_mapping(path: Path) -> dict:
    return read_scenario_file(path)


def varied_fields(study: Study) -> dict[str, str]:
    """Each field the study varies -> where it is varied (vary.grid.…, vary.zip.…, vary.cases[i])."""
    v = study.vary
    out = {k: f"vary.grid.{k}" for k in v.grid} | {k: f"vary.zip.{k}" for k in v.zip}
    for i, c in enumerate(v.cases):
        out.update({k: f"vary.cases[{i}].set.{k}" for k in c.set})
    return out


_MISSING = object()


def check_cli_sets(study: Study, cli_set: dict[str, Any]) -> None:
    """A ``--set`` whose field the study varies would never apply: say so."""
    varied = varied_fields(study)
    for path, value in cli_set.items():
        for vpath, where in varied.items():
            inside = value if isinstance(value, dict) else {}
            lost = path == vpath or path.startswith(vpath + ".") or (
                vpath.startswith(path + ".")
                and get_path(inside, vpath[len(path) + 1:], _MISSING) is not _MISSING)
            if lost:
                raise StudyError("--set", path, f"{vpath} is varied by the study ({where}), which "
                                 "would override this --set in every configuration; remove the --set "
                                 "or change the study's vary")


def _combinations(study: Study, cli_set: dict[str, Any] | None = None, folder: Path = Path(".")
                  ) -> list[tuple[dict[str, Any], dict[str, str], dict[str, Any]]]:
    """(overrides, where each override is set, swept values) for each configuration; relative
    file paths the study file writes start from its ``folder``."""
    v = study.vary
    grid_keys = list(v.grid)
    grid = list(itertools.product(*(v.grid[k] for k in grid_keys))) or [()]
    zip_keys = list(v.zip)
    zipped = list(zip(*(v.zip[k] for k in zip_keys), strict=True)) or [()]
    cases: list[Any] = list(enumerate(v.cases)) or [None]
    out = []
    for case, g, z in itertools.product(cases, grid, zipped):
        overrides = {**{k: paths_from(folder, k, x) for k, x in study.set.items()}, **(cli_set or {})}
        sources = {k: f"set.{k}" for k in study.set} | {k: f"--set {k}" for k in cli_set or {}}
        values: dict[str, Any] = {}
        if case is not None:
            i, c = case
            overrides.update({k: paths_from(folder, k, x) for k, x in c.set.items()})
            sources.update({k: f"vary.cases[{i}].set.{k}" for k in c.set})
            values["case"] = c.name
        for kind, keys, vals in (("grid", grid_keys, g), ("zip", zip_keys, z)):
            for k, val in zip(keys, vals, strict=True):
                overrides[k] = paths_from(folder, k, val)
                sources[k] = f"vary.{kind}.{k}"
                values[k] = val
        out.append((overrides, sources, values))
    return out


def _label(values: dict[str, Any], short: dict[str, str]) -> str:
    parts = [show(val) if k == "case" else f"{short[k]}={show(val)}" for k, val in values.items()]
    return ", ".join(parts) or "base"


def _culprit(err_field: str | None, sources: dict[str, str]) -> str | None:
    """The override that most likely caused a scenario error at ``err_field``."""
    if not err_field:
        return None
    hits = [p for p in sources
            if err_field == p or err_field.startswith(p + ".") or p.startswith(err_field + ".")]
    return max(hits, key=len) if hits else None


def _probe_rate(study: Study) -> float | None:
    obj = study.objective
    if isinstance(obj, MaxRate):
        return obj.bracket[0]
    if isinstance(obj, Curves):
        return obj.rates[0]
    return obj.rate


def _default_rate_field(data: dict) -> str:
    return "workload.trace.rate" if get_path(data, "workload.trace") else "workload.arrival.rate"


def plan_study(study: Study, study_path: str | Path, cli_set: dict[str, Any] | None = None,
               seeds: int | None = None) -> Plan:
    """Expand ``study`` into configurations and validate every one (errors name the file).
    ``cli_set`` are the command line's ``--set`` overrides, applied after the study's ``set``;
    ``seeds`` (``--seeds``) overrides the study's ``seeds``."""
    study_path = Path(study_path)
    source = str(study_path)
    if cli_set:
        check_cli_sets(study, cli_set)
    missing = [f for f in study.requires if not has_field(Scenario, f)]
    if missing:
        raise StudyError(source, "requires", f"this study needs the scenario field(s) "
                         f"{', '.join(missing)}, which this version of servesim does not have")
    scenario_path = (study_path.parent / study.scenario).resolve()
    base_dir = scenario_path.parent
    try:
        base = read_scenario_mapping(scenario_path)
    except ScenarioError as e:
        raise StudyError(source, "scenario", f"{e}") from None
    scenario_from_dict(base, str(scenario_path), base_dir)  # the base on its own: names its file

    combos = _combinations(study, cli_set, study_path.parent.resolve())
    swept = list(combos[0][2])
    short = short_names([k for k in swept if k != "case"])
    obj = study.objective
    rate = _probe_rate(study)
    configs: list[Config] = []
    checked_workloads: set[str] = set()
    first_infeasible: StudyError | None = None
    for i, (overrides, sources, values) in enumerate(combos):
        label = _label(values, short)
        data = apply(base, overrides, source, "")
        rate_field = obj.rate_field or _default_rate_field(data)
        probe = data
        if rate is not None and rate_field in overrides:
            raise StudyError(source, sources[rate_field],
                             f"{rate_field} is set by the {obj.kind} objective; vary it there "
                             "(bracket, rates or rate), not in the study's overrides")
        if rate is not None:
            probe = apply(data, {}, source, "")
            set_path(probe, rate_field, rate, source, "objective.rate_field")
            sources = {**sources, rate_field: "objective.rate_field" if obj.rate_field
                       else "objective"}
        skipped = None
        try:
            scenario = _validate(probe, source, base_dir, label, overrides, sources)
        except StudyError as e:
            scenario = _schema_only(probe, base_dir)
            if scenario is None or study.infeasible == "error":
                raise
            skipped = e.message
            first_infeasible = first_infeasible or e
        else:
            _check_traffic(scenario, probe, source, label, checked_workloads)
            _check_profile(scenario, source, label)
        gpus = gpu_inventory(scenario)
        configs.append(Config(i, label, values, sources, data, rate_field if rate is not None
                              else None, gpus, cost_per_hour(gpus, study.prices, own_prices(scenario)), skipped))
    if first_infeasible is not None and all(c.skipped for c in configs):
        raise first_infeasible  # nothing can run: say why, as for a single configuration
    name = study.name or study_path.stem
    return Plan(study, source, scenario_path, base_dir, name, configs, swept, seeds or study.seeds)


def _validate(data: dict, source: str, base_dir: Path, label: str, overrides: dict[str, Any],
              sources: dict[str, str]) -> Scenario:
    try:
        return scenario_from_dict(data, f"{source} [{label}]", base_dir)
    except ScenarioError as e:
        culprit = _culprit(e.field, sources)
        if culprit is None and len(overrides) == 1:
            culprit = next(iter(overrides))  # cross-field checks (does it fit?) name no field
        if culprit is None:
            where = "vary" if any(v.startswith("vary") for v in sources.values()) else \
                "scenario" if not overrides else "set"
            given = ", ".join(f"{k}={show(v)}" for k, v in overrides.items())
            raise StudyError(source, where, f"configuration [{label}] ({given or 'no overrides'})"
                             f": {e.field or 'scenario'}: {e.message}") from None
        value = get_path(data, culprit)
        raise StudyError(source, sources[culprit],
                         f"{culprit}={show(value)} in configuration [{label}]: "
                         f"{e.field}: {e.message}") from None


def _schema_only(data: dict, base_dir: Path) -> Scenario | None:
    """The scenario if it passes the schema (so only a cross-field check such as "does the
    model fit" failed), else None."""
    try:
        return Scenario.model_validate({**data, "base_dir": str(base_dir)})
    except ValidationError:
        return None


def _check_profile(scenario: Scenario, source: str, label: str) -> None:
    """A cost profile that cannot price this configuration stops the study now (``profile_checks``)."""
    if scenario.cost.model != "profile":
        return  # (checking imports the core)
    from sim.pricing.profile_checks import check_scenario

    try:
        check_scenario(scenario)
    except InputError as e:
        raise StudyError(source, f"scenario (configuration [{label}])", str(e)) from None


def _check_traffic(scenario: Scenario, data: dict, source: str, label: str, seen: set[str]) -> None:
    """Read each distinct trace-based workload once, so a missing trace stops the study now."""
    workload = data.get("workload") or {}
    if '"path":' not in canonical(workload):
        return
    key = canonical(workload)
    if key in seen:
        return
    seen.add(key)
    from sim.traffic import build_workload

    try:
        build_workload(scenario)
    except InputError as e:
        raise StudyError(source, f"scenario (configuration [{label}])", str(e)) from None
