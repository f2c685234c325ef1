"""Overrides on a scenario's raw mapping, by dotted field path, and short labels for them."""

from __future__ import annotations

import copy
import json
from typing import Any

from sim.study.schema import StudyError


def set_path(data: dict, dotted: str, value: Any, source: str, where: str) -> None:
    """Set ``a.b.c`` in a nested mapping, creating levels as needed (as ``--set`` does); a
    number indexes a list (``workload.classes.1.priority``)."""
    keys = dotted.split(".")
    if not all(keys):
        raise StudyError(source, where, f"{dotted!r} is not a field path like scheduler.policy")
    node: Any = data
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise StudyError(source, where, f"{'.'.join(keys[: i + 1])}: expected an index below "
                                 f"{len(node)} into the list")
            key = int(key)
        elif not isinstance(node, dict):
            raise StudyError(source, where, f"{'.'.join(keys[:i])} is a "
                             f"{type(node).__name__}, cannot set {dotted}")
        if last:
            node[key] = copy.deepcopy(value)
            return
        child = node[key] if isinstance(node, list) else node.get(key)
        if child is None or (key == "model" and isinstance(child, str)):
            child = node[key] = {}
        node = child


def get_path(data: dict, dotted: str, default: Any = None) -> Any:
    node: Any = data
    for key in dotted.split("."):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return default
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
