"""The named model catalog: the built-in Llama-style shapes (``models.BUILTIN_MODELS``) and the
models whose real ``config.json`` ships in ``sim/scenario/data/models`` (``SOURCES.md`` says where
each came from), read by the same reader as a user's ``hf_config``."""

from __future__ import annotations

from functools import cache
from importlib import resources

from sim.scenario.specs.hf_config import model_from_hf_config
from sim.scenario.specs.models import BUILTIN_MODELS, ModelSpec

DATA = "sim.scenario.data"


def config_names() -> list[str]:
    """Catalog names with a shipped config.json (the file's stem)."""
    folder = resources.files(DATA).joinpath("models")
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


@cache
def _from_config(name: str) -> ModelSpec:
    with resources.as_file(resources.files(DATA).joinpath("models", f"{name}.json")) as path:
        return model_from_hf_config(path, name)


class _Catalog(dict):
    """Name → ModelSpec; the shipped configs are read the first time they are looked up."""

    def __init__(self):
        super().__init__(BUILTIN_MODELS)
        self._lazy = [n for n in config_names() if n not in BUILTIN_MODELS]
        for n in self._lazy:
            super().__setitem__(n, None)

    def __getitem__(self, name: str) -> ModelSpec:
        spec = super().__getitem__(name)
        if spec is None:
            spec = _from_config(name)
            super().__setitem__(name, spec)
        return spec

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def values(self):
        return [self[n] for n in self]

    def items(self):
        return [(n, self[n]) for n in self]


MODEL_CATALOG: dict[str, ModelSpec] = _Catalog()


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalog name (case-insensitive)."""
    key = name.lower()
    if key not in MODEL_CATALOG:
        known = ", ".join(sorted(MODEL_CATALOG))
        raise KeyError(f"unknown model {name!r}; known models: {known}")
    return MODEL_CATALOG[key]
