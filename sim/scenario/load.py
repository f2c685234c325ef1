"""Reading a scenario: YAML (or the embedded default), ``--set`` overrides, validation against
the schema (``sim/scenario/schema.py``) and the checks that need the specs and files. Errors
name the file, the field path and what was expected.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from sim.errors import InputError, ScenarioError
from sim.inputs import check_file, load_yaml_mapping, parse_value, parse_yaml, validation_message
from sim.scenario.gpu_input import BRANCH_TAGS
from sim.scenario.schema import MIN_REFRESH_S, ReplicaSpec, Router, Scenario

DEFAULT_SCENARIO = "default.yaml"
LOADER_FIELDS = ("base_dir", "source")  # Scenario fields the loader sets, not the file


def _set_path(data: dict, dotted: str, value: Any, source: str) -> None:
    """Set ``a.b.c`` in nested mappings; a number indexes a list (``workload.classes.1.priority``)."""
    keys = dotted.split(".")
    node: Any = data
    for i, key in enumerate(keys):
        here = ".".join(keys[: i + 1])
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ScenarioError(source, here, f"expected an index below {len(node)} into the list")
            if last:
                node[int(key)] = value
                return
            node = node[int(key)]
            continue
        if not isinstance(node, dict):
            raise ScenarioError(source, ".".join(keys[:i]), f"is a {type(node).__name__}, cannot set {dotted}")
        if last:
            node[key] = value
            return
        child = node.get(key)
        if child is None or (isinstance(child, str) and key == "model"):
            child = node[key] = {}
        elif isinstance(child, str) and key == "gpu":  # a field of a catalog GPU: that GPU, changed
            child = node[key] = {"base": child}
        node = child


# Fields that name a file: a trace's or an arrival's ``path``, a model's ``hf_config``, a cost
# profile. Written in a scenario they resolve against its folder (``Scenario.resolve``).
PATH_FIELDS = ("path", "hf_config", "profile")


def paths_from(folder: Path, dotted: str, value: Any) -> Any:
    """``value`` (for the field ``dotted``) with the relative file paths in it made absolute
    against ``folder``: the folder of the file or the command line that wrote them."""
    key = dotted.rsplit(".", 1)[-1]
    if isinstance(value, str) and key in PATH_FIELDS:
        p = Path(value).expanduser()
        return value if p.is_absolute() else str(folder / p)
    if isinstance(value, dict):
        return {k: paths_from(folder, f"{dotted}.{k}", v) for k, v in value.items()}
    if isinstance(value, list):
        return [paths_from(folder, f"{dotted}.{i}", v) for i, v in enumerate(value)]
    return value


def paths_from_working_folder(dotted: str, value: Any) -> Any:
    """A value given on the command line (``--set dotted=value``) with its relative file paths
    made absolute against the working folder, where the person typing it stands (paths written
    in a scenario file still resolve against the file's folder, a study's against the study's)."""
    return paths_from(Path.cwd(), dotted, value)


def apply_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """Apply ``field.path=value`` overrides; values are parsed as YAML (``8``, ``true``, ``[1,2]``);
    relative file paths in them start from the working folder (``paths_from_working_folder``)."""
    for item in overrides:
        if "=" not in item:
            raise ScenarioError("--set", item, "expected field.path=value")
        dotted, raw = item.split("=", 1)
        dotted = dotted.strip()
        if not dotted or not all(dotted.split(".")):
            raise ScenarioError("--set", item, "expected field.path=value, e.g. scheduler.policy=static")
        value = paths_from_working_folder(dotted, parse_value(raw, f"{source} (--set)", ScenarioError, dotted))
        _set_path(data, dotted, value, f"{source} (--set)")
    return data


def _union_fields(model: type[BaseModel], seen: set | None = None) -> set[str]:
    """Names of the schema's fields whose type is a union (pydantic puts the chosen branch's
    tag right after them in error locations; users never wrote that tag)."""
    seen = set() if seen is None else seen
    names: set[str] = set()
    if model in seen:
        return names
    seen.add(model)
    for name, info in model.model_fields.items():
        ann = info.annotation
        args = [a for a in get_args(ann) if a is not type(None)]
        while len(args) == 1 and get_args(args[0]):
            args = [a for a in get_args(args[0]) if a is not type(None)]
        if len(args) > 1 and any(isinstance(a, type) and issubclass(a, BaseModel) for a in args):
            names.add(name)
        for a in [ann, *args, *(x for arg in args for x in get_args(arg))]:
            if isinstance(a, type) and issubclass(a, BaseModel):
                names |= _union_fields(a, seen)
    return names


def _format_loc(loc: tuple) -> str:
    parts: list[str] = []
    unions = _union_fields(Scenario)
    previous = None
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif (previous in unions and previous != p) or str(p).startswith("function-") or p in BRANCH_TAGS:
            previous = None
            continue  # a union's branch tag
        else:
            parts.append(("." if parts else "") + str(p))
        previous = p
    return "".join(parts) or "(top level)"


def scenario_from_dict(data: Any, source: str, base_dir: str | Path = ".") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(source, None, f"expected a mapping of fields, got {type(data).__name__}")
    for key in LOADER_FIELDS:
        if key in data:
            raise ScenarioError(source, str(key), "unknown field")
    try:
        scenario = Scenario.model_validate({**data, "base_dir": str(base_dir), "source": source})
    except ValidationError as e:
        err = e.errors()[0]
        msg = validation_message(err)
        more = f" (and {len(e.errors()) - 1} more problems)" if len(e.errors()) > 1 else ""
        raise ScenarioError(source, _format_loc(err["loc"]), msg + more) from None
    check_feasible(scenario, source)
    return scenario


def check_feasible(s: Scenario, source: str) -> None:
    """Cross-field checks that need the specs and files: does the model's config read, does
    the model fit on every replica at all, is the cost profile a file?"""
    try:
        spec = s.model_spec
    except InputError as e:  # names the config file and its field
        raise type(e)(e.source, e.field, f"{e.message} (model.hf_config of {source})") from None
    if s.cost.model == "profile":
        from sim.errors import ProfileError

        check_file(s.resolve(s.cost.profile), "cost.profile", ProfileError, "profile file")
    if s.scheduler.speculative and s.scheduler.speculative.method == "mtp" and not spec.mtp_layers:
        raise ScenarioError(source, "scheduler.speculative.method",
                            f"mtp needs a model with next-n prediction layers; {spec.name} has none")
    if s.scheduler.speculative and s.scheduler.speculative.draft_model == spec.name:
        raise ScenarioError(source, "scheduler.speculative.draft_model",
                            "must be a smaller model than the target")
    check_router(s.router, source)
    check_autoscale(s, source)
    check_tiers(s, source)
    gib = 1024**3
    for r in s.replica_specs:
        hw, mem = r.hardware, r.memory
        field = _group_field(s, r, "hardware")
        per_block = mem.kv_bytes_per_token * mem.block_size
        if mem.num_blocks < 1 and mem.fixed_blocks is None and 0 < mem.kv_bytes < per_block:
            raise ScenarioError(
                source, f"{_group_field(s, r, 'scheduler')}.block_size",
                f"one KV block of {mem.block_size} tokens takes {per_block / gib:.1f} GiB per GPU, "
                f"more than the {mem.kv_bytes / gib:.1f} GiB left for the KV cache; expected a "
                "smaller block_size")
        if mem.num_blocks < 1:
            raise ScenarioError(
                source, field,
                f"{spec.name} does not fit on {hw.gpu_name} with tp={hw.tp}, pp={hw.pp}: weights "
                f"{mem.weight_bytes / gib:.1f} GiB + activations {mem.activation_bytes / gib:.1f} GiB "
                f"per GPU exceed the usable {mem.usable_bytes / gib:.1f} GiB; expected more GPUs "
                "(tp/pp) or a larger GPU")
        if r.scheduler.policy == "slots":
            check_slots(s, r, source)
        if reason := r.gpu.tp_refusal(hw.tp):
            raise ScenarioError(source, f"{field}.tp", reason)
        tpa = hw.tp // hw.dp_attention if hw.tp % hw.dp_attention == 0 else hw.tp  # an attention rank's GPUs
        if spec.num_heads % tpa or (spec.num_kv_heads % tpa and tpa % spec.num_kv_heads):
            raise ScenarioError(source, f"{field}.tp",
                                f"must divide the model's {spec.num_heads} attention heads "
                                f"({spec.num_kv_heads} KV heads)"
                                + (f" (tp / dp_attention = {tpa} GPUs per attention rank)" if tpa != hw.tp else ""))
        if spec.num_layers < hw.pp:
            raise ScenarioError(source, f"{field}.pp", f"exceeds the model's {spec.num_layers} layers")
        check_wide_ep(s, r, source, field)
        if hw.expert_parallel and spec.num_experts % hw.tp and not (
                hw.expert_load is not None and hw.expert_load.eplb):
            raise ScenarioError(source, f"{field}.expert_parallel",
                                f"needs tp to divide the model's {spec.num_experts} experts "
                                f"({'a dense model' if not spec.is_moe else ''})".replace(" ()", ""))


def check_wide_ep(s: Scenario, r: ReplicaSpec, source: str, field: str) -> None:
    """What wide EP (data-parallel attention, experts over every GPU) needs: an MoE model with
    its experts split (expert_parallel), ranks that divide the GPUs, whole experts per GPU (with
    EPLB's copies), and no layers it does not model."""
    hw, spec = r.hardware, s.model_spec
    if hw.dp_balance != "round-robin" and hw.dp_attention == 1:
        raise ScenarioError(source, f"{field}.dp_balance", "balances attention DP ranks: set dp_attention > 1")
    wide = hw.dp_attention > 1 or hw.expert_load is not None or hw.two_batch_overlap
    if not wide:
        return
    name = ("dp_attention" if hw.dp_attention > 1 else "expert_load" if hw.expert_load is not None
            else "two_batch_overlap")
    if not spec.is_moe or not hw.expert_parallel:
        raise ScenarioError(source, f"{field}.{name}", f"wide expert parallelism needs an MoE model with "
                            f"hardware.expert_parallel: true ({spec.name}{'' if spec.is_moe else ' is dense'})")
    if hw.tp % hw.dp_attention:
        raise ScenarioError(source, f"{field}.dp_attention", f"must divide tp ({hw.tp}): each rank runs on "
                            "tp / dp_attention GPUs")
    if hw.two_batch_overlap and hw.dp_attention == 1:
        raise ScenarioError(source, f"{field}.two_batch_overlap", "overlaps the all-to-all of wide EP: "
                            "set dp_attention > 1")
    if hw.dp_attention > 1 and (hw.pp > 1 or spec.sliding_window or spec.chunked or spec.state_bytes_per_request()):
        raise ScenarioError(source, f"{field}.dp_attention", "not modelled with pipeline parallelism or "
                            f"sliding-window / linear-attention layers ({spec.name}, pp {hw.pp})")
    x = hw.expert_load
    if x is not None:
        if x.counts is not None and len(x.counts) != spec.num_experts:
            raise ScenarioError(source, f"{field}.expert_load.counts", f"expected one count per expert: "
                                f"{spec.name} has {spec.num_experts}, got {len(x.counts)}")
        if (spec.num_experts + x.redundant_experts) % hw.tp:
            raise ScenarioError(source, f"{field}.expert_load.redundant_experts",
                                f"{spec.num_experts} experts + {x.redundant_experts} copies must fill the {hw.tp} "
                                "GPUs' slots evenly")


def check_slots(s, r, source: str) -> None:
    """A slots engine (llama.cpp) allocates every slot's context when it starts: its KV blocks are
    those contexts, so they are not set by hand and must fit in the memory the weights leave."""
    sch, mem = r.scheduler, r.memory
    where = _group_field(s, r, "scheduler")
    if r.hardware.kv_blocks is not None:
        raise ScenarioError(source, f"{_group_field(s, r, 'hardware')}.kv_blocks",
                            "a slots engine's KV cache is its slots' contexts (max_num_seqs × slot_context); "
                            "expected it unset")
    if sch.slot_context > s.model_spec.max_model_len:
        raise ScenarioError(source, f"{where}.slot_context",
                            f"{sch.slot_context:,} tokens exceed {s.model_spec.name}'s {s.model_spec.max_model_len:,}")
    per_block = mem.kv_bytes_per_token * mem.block_size
    need = mem.num_blocks * per_block
    if need > mem.kv_bytes:
        gib = 1024**3
        raise ScenarioError(source, f"{where}.slot_context",
                            f"{sch.max_num_seqs} slots of {sch.slot_context:,} tokens need {need / gib:.2f} GiB of KV "
                            f"cache per GPU, more than the {max(mem.kv_bytes, 0) / gib:.2f} GiB the weights and "
                            "activations leave; expected fewer or shorter slots")


MAX_SAMPLES_IN_FLIGHT = 1000  # samples taken but not yet visible (router.delay_s / router.refresh_s)


def check_router(x: Router, source: str) -> None:
    """The routers' sampling (sim/core/router_signals.py) must mean something: a router that
    reads no load signal has none to sample, exact state is never late, and a refresh faster
    than MIN_REFRESH_S would be work without a real router behind it."""
    if x.policy == "round-robin":
        for field in ("refresh_s", "add_routed"):
            if getattr(x, field) not in (None, 0, False):
                raise ScenarioError(source, f"router.{field}", "round-robin reads no load signal; expected it unset")
    if 0 < x.refresh < MIN_REFRESH_S:
        raise ScenarioError(source, "router.refresh_s",
                            f"expected 0 (exact state) or at least {MIN_REFRESH_S} s, got {x.refresh}")
    if x.refresh == 0:
        for field, value in (("delay_s", x.delay_s), ("add_routed", x.add_routed)):
            if value:
                raise ScenarioError(source, f"router.{field}",
                                    f"needs sampled state (router.refresh_s > 0); {x.policy} with refresh_s 0 "
                                    "sees the exact state")
    elif x.delay_s / x.refresh > MAX_SAMPLES_IN_FLIGHT:
        raise ScenarioError(source, "router.delay_s",
                            f"expected at most {MAX_SAMPLES_IN_FLIGHT} × router.refresh_s ({x.refresh} s), got "
                            f"{x.delay_s}")


def check_tiers(s: Scenario, source: str) -> None:
    """KV tiers hold whole blocks of every layer: a model whose sliding-window or state layers
    the engines keep apart (freed behind the window, a state per request) is refused, and so is
    a tier too small for one block."""
    if s.kv_tiers is None:
        return
    if not any(r.scheduler.prefix_caching for r in s.replica_specs):
        raise ScenarioError(source, "kv_tiers", "needs scheduler.prefix_caching: true (the tiers hold the blocks "
                            "the GPU's prefix cache gives up)")
    if any(r.hardware.pp > 1 for r in s.replica_specs):
        raise ScenarioError(source, "kv_tiers", "not modelled with pipeline parallelism (hardware.pp > 1)")
    if any(r.hardware.dp_attention > 1 for r in s.replica_specs):
        raise ScenarioError(source, "kv_tiers", "not modelled with attention DP ranks (hardware.dp_attention > 1: "
                            "each rank's own tiers, or their share of one, are not)")
    spec = s.model_spec
    if spec.sliding_window or spec.chunked or spec.state_bytes_per_request():
        raise ScenarioError(source, "kv_tiers", f"not modelled for {spec.name}: its sliding-window or linear-"
                            "attention / SSM layers keep their KV apart from the blocks the tiers hold")
    gib = 1024**3
    for i, t in enumerate(s.kv_tiers.tiers):
        for r in s.replica_specs:
            block = r.memory.kv_bytes_per_token * r.memory.block_size * r.hardware.tp
            if t.capacity_gb * gib < block:
                raise ScenarioError(source, f"kv_tiers.tiers[{i}].capacity_gb",
                                    f"{t.capacity_gb} GiB holds no KV block of {block / gib:.3g} GiB")


def check_autoscale(s: Scenario, source: str) -> None:
    """What an autoscaled fleet cannot be: pools or groups of different replicas (it grows
    and shrinks one kind of replica), a fixed ``replicas`` beside it, a closed loop (whose load
    follows the fleet rather than the clock)."""
    if s.autoscale is None:
        return
    if s.disaggregation is not None:
        raise ScenarioError(source, "autoscale", "cannot scale disaggregated prefill and decode pools (not "
                            "modelled); remove autoscale or disaggregation")
    if s.replica_groups is not None:
        raise ScenarioError(source, "autoscale", "scales one kind of replica: remove replica_groups "
                            "(autoscale.max_replicas sets the fleet's size)")
    if "replicas" in s.model_fields_set:
        raise ScenarioError(source, "replicas", "the autoscaled fleet's size is autoscale.min_replicas .. "
                            "max_replicas: remove replicas")
    if s.workload.classes is None and s.workload.arrival.process == "closed":
        raise ScenarioError(source, "workload.arrival.process", "a closed loop's load follows the fleet, so "
                            "autoscale cannot follow it: use an open arrival process (poisson, gamma, "
                            "constant, trace)")


def _group_field(s: Scenario, r: ReplicaSpec, part: str) -> str:
    """Where replica ``r``'s ``part`` (hardware or scheduler) is set in the scenario."""
    if s.disaggregation is not None:
        g = getattr(s.disaggregation, r.role)
        return f"disaggregation.{r.role}.{part}" if getattr(g, part) else part
    if s.replica_groups is not None:
        i, seen = 0, 0
        for i, g in enumerate(s.replica_groups):  # noqa: B007
            seen += g.count
            if r.index < seen:
                break
        return f"replica_groups[{i}].{part}" if getattr(s.replica_groups[i], part) else part
    return part


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read a scenario file (or the embedded default when ``path`` is None) and validate it."""
    if path is None:
        source = f"<default scenario {DEFAULT_SCENARIO}>"
        text = resources.files("sim.scenario.data").joinpath(DEFAULT_SCENARIO).read_text()
        data = parse_yaml(text, source, ScenarioError)
        base_dir: Path = Path.cwd()
    else:
        path = Path(path)
        source = str(path)
        data = read_scenario_file(path)
        base_dir = path.parent
    if overrides:
        before = data.get("model", "llama-3-8b")
        data = apply_overrides(data, overrides, source)
        if not any(o.split("=", 1)[0].strip() == "name" for o in overrides):
            data = _name_follows_model(data, before)
    return scenario_from_dict(data, source, base_dir)


def _name_follows_model(data: dict, before) -> dict:
    """After ``--set model=X`` (and no ``--set name=``) the scenario's name says X: the old
    model's name in it (``llama-3-8b`` or ``llama3-8b``) replaced, else ``-X`` appended."""
    after, name = data.get("model"), data.get("name")
    if not isinstance(after, str) or not isinstance(before, str) or after == before or not isinstance(name, str):
        return data
    spellings = {before, before.replace("-", "")} | {
        before[:i] + before[i + 1:] for i, ch in enumerate(before) if ch == "-"}
    for old in sorted(spellings, key=len, reverse=True):
        at = name.lower().find(old.lower())
        if at >= 0:
            return {**data, "name": name[:at] + after + name[at + len(old):]}
    return {**data, "name": f"{name}-{after}"}


def read_scenario_file(path: str | Path) -> dict:
    """A scenario file's mapping of fields (not yet validated)."""
    data = load_yaml_mapping(path, ScenarioError, "scenario file")
    if {"scenario", "objective"} <= data.keys():
        raise ScenarioError(str(path), None, "this is a study file (it has scenario and objective), "
                            "not a scenario; run it with servesim study")
    return data
