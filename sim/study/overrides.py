"""Overrides on a scenario's raw mapping, by dotted field path, and short labels for them."""

from __future__ import annotations

import copy
import json
from typing import Any

from sim.study.schema import StudyError


def set_path(data: dict, dotted: str, value: Any, source: str, where: str) -> None:
    """Set ``a.b.c`` in a nested mapping, creating levels as needed (as ``--set`` does)."""
    keys = dotted.split(".")
    if not all(keys):
        raise StudyError(source, where, f"{dotted!r} is not a field path like scheduler.policy")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None or (key == "model" and isinstance(child, str)):
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise StudyError(source, where, f"{'.'.join(keys[: i + 1])} is a "
                             f"{type(child).__name__}, cannot set {dotted}")
        node = child
    node[keys[-1]] = copy.deepcopy(value)


def get_path(data: dict, dotted: str, default: Any = None) -> Any:
    node: Any = data
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def apply(data: dict, overrides: dict[str, Any], source: str, where: str) -> dict:
    """A copy of ``data`` with ``overrides`` applied in order."""
    out = copy.deepcopy(data)
    for path, value in overrides.items():
        set_path(out, path, value, source, f"{where}.{path}" if where else path)
    return out


def canonical(value: Any) -> str:
    """A stable text form of any YAML value (for hashing and for table cells)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def show(value: Any) -> str:
    """A value as a person would write it in a label."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, (int, float, bool)) or value is None:
        return str(value)
    return canonical(value)


def short_names(paths: list[str]) -> dict[str, str]:
    """The last component of each path, or more of it where two would read alike."""
    out = {}
    for p in paths:
        parts = p.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            if sum(1 for q in paths if q == name or q.endswith("." + name)) == 1:
                break
        out[p] = name
    return out
