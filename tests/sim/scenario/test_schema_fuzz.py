"""Property: whatever a scenario holds (any field set to any YAML value, fields removed,
unknown ones added, ``--set`` text of any kind), loading it gives a valid scenario or an
InputError naming the file and a field, never another exception; and a valid scenario's
traffic builds (or is refused by name) without a crash."""

from __future__ import annotations

import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sim.errors import InputError
from sim.scenario.load import apply_overrides, scenario_from_dict
from sim.scenario.schema import Scenario
from sim.traffic import build_workload

SOURCE = "fuzz.yaml"

BASES = [
    {"model": "llama-3-8b", "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate": 5},
                                         "prompt_len": {"dist": "uniform", "min": 8, "max": 256},
                                         "output_len": {"dist": "lognormal", "mean": 32, "sigma": 0.5}}},
    {"model": "tiny-llama", "scheduler": {"policy": "chunked-prefill", "chunk_size": 512, "prefix_caching": True},
     "workload": {"classes": [
         {"name": "chat", "num_requests": 20, "arrival": {"process": "gamma", "rate": 3, "cv": 2},
          "shared_prefix": {"num_prompts": 3, "length": 64}, "slo": {"ttft_s": 0.5}},
         {"name": "batch", "num_requests": 10, "priority": 1,
          "conversations": {"turns": {"dist": "fixed", "value": 3},
                            "think_time_s": {"dist": "exponential", "mean": 2}}}]}},
    {"model": "llama-3-8b", "disaggregation": {"prefill": {"count": 1}, "decode": {"count": 2},
                                               "link": {"type": "nvlink"}},
     "quantization": {"weights": "fp8", "kv_cache": "fp8"}, "slo": {"ttft_s": 1, "tpot_s": 0.1},
     "workload": {"num_requests": 30, "arrival": {"process": "constant", "rate": 2}}},
]


def field_paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> set[str]:
    """Every dotted field path of a schema model, through optional fields and union branches."""
    out: set[str] = set()
    for name, info in model.model_fields.items():
        if name in ("base_dir", "source"):
            continue
        path = f"{prefix}{name}"
        out.add(path)
        todo, seen = [info.annotation], set()
        while todo and depth < 5:
            t = todo.pop()
            if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
                seen.add(t)
                out |= field_paths(t, path + ".", depth + 1)
            todo.extend(typing.get_args(t))
    return out


PATHS = [*sorted(field_paths(Scenario)), "workload.classes.0.num_requests", "workload.classes.1.slo.e2e_s",
         "replica_groups.0.count", "bogus", "workload.arrival.bogus"]
WORDS = ["continuous", "chunked-prefill", "static", "poisson", "gamma", "trace", "lognormal", "fixed",
         "uniform", "empirical", "H100-SXM", "A100-80GB", "llama-3-8b", "mixtral-8x7b", "fp8", "swap",
         "1e3", "true", "-1", "", "nowhere.csv", "mooncake", "least-kv", "profile", "zipf"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.integers(), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(0.001, 100), st.sampled_from(WORDS),
    st.text(max_size=10))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["dist", "process", "rate", "min", "max", "value", "mean", "name", "count", "path",
                     "policy", "gpu", "tp", "x"]) | st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


def set_path(data: dict, dotted: str, value) -> None:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                return
            node = node[int(k)]
            continue
        if not isinstance(node, dict):
            return
        node = node.setdefault(k, {})
    if isinstance(node, dict):
        node[keys[-1]] = value
    elif isinstance(node, list) and keys[-1].isdigit() and int(keys[-1]) < len(node):
        node[int(keys[-1])] = value


def delete_path(data: dict, dotted: str) -> None:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(keys[-1], None)


mutation = st.tuples(st.sampled_from(["set", "set", "set", "delete"]), st.sampled_from(PATHS), values)


def names_a_field(e: InputError) -> bool:
    return bool(e.field) or "model.hf_config of" in e.message


def small(s: Scenario) -> bool:
    """Traffic cheap enough to build in a property test."""
    w = s.workload
    streams = list(w.classes) if w.classes else [w]
    for c in streams:
        n = c.num_requests if c.num_requests is not None else w.num_requests
        if n is None or n > 500 or c.duration_s is not None or w.duration_s is not None:
            return False
        if c.conversations is not None and (c.conversations.turns.dist != "fixed"
                                            or c.conversations.turns.value > 8):
            return False
        if c.shared_prefix is not None and c.shared_prefix.length > 100_000:
            return False
    return True


def check(data, tmp_path, overrides=()) -> None:
    try:
        if overrides:
            data = apply_overrides(data, list(overrides), SOURCE)
        scenario = scenario_from_dict(data, SOURCE, tmp_path)
    except InputError as e:
        assert names_a_field(e), str(e)
        assert SOURCE in str(e) or "--set" in str(e) or e.source != SOURCE, str(e)
        return
    if small(scenario):
        try:
            w = build_workload(scenario)
        except InputError as e:
            assert names_a_field(e), str(e)
            return
        assert len(w) >= 0 and all(math.isfinite(x) for x in w.arrival[:5])


FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(base=st.sampled_from(range(len(BASES))), mutations=st.lists(mutation, min_size=1, max_size=4))
def test_any_scenario_mapping_loads_or_names_a_field(tmp_path, base, mutations):
    import copy

    data = copy.deepcopy(BASES[base])
    for op, path, value in mutations:
        (set_path(data, path, value) if op == "set" else delete_path(data, path))
    check(data, tmp_path)


@FUZZ
@given(base=st.sampled_from(range(len(BASES))),
       sets=st.lists(st.tuples(st.sampled_from(PATHS) | st.text(max_size=12),
                               st.text(max_size=16) | st.sampled_from(WORDS)
                               | values.map(lambda v: __import__("yaml").safe_dump(v).strip())),
                     min_size=1, max_size=3))
def test_any_set_text_loads_or_names_a_field(tmp_path, base, sets):
    import copy

    check(copy.deepcopy(BASES[base]), tmp_path, [f"{p}={v}" for p, v in sets])


@pytest.mark.parametrize("base", range(len(BASES)))
def test_the_fuzz_bases_are_valid(tmp_path, base):
    scenario_from_dict(BASES[base], SOURCE, tmp_path)


@FUZZ
@given(text=st.text(max_size=200) | values.map(lambda v: __import__("yaml").safe_dump(v)),
       raw=st.binary(max_size=40))
def test_any_file_content_loads_or_names_the_file(tmp_path, text, raw):
    from sim.scenario.load import load_scenario

    path = tmp_path / SOURCE
    for content in (text.encode("utf-8", "surrogatepass"), raw):
        path.write_bytes(content)
        try:
            load_scenario(path)
        except InputError as e:
            assert str(path) in str(e) or e.source != str(path), str(e)
