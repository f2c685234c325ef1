"""Routers: which replica a new request goes to."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Routable(Protocol):
    index: int

    @property
    def outstanding(self) -> int: ...

    def kv_load(self) -> float: ...

    def submit(self, rid: int) -> None: ...


class Router:
    name = "base"

    def __init__(self, replicas: list[Routable], rng: np.random.Generator | None = None,
                 table=None):
        self.replicas = replicas
        self.rng = rng or np.random.default_rng(0)
        self.table = table

    def pick(self, rid: int) -> Routable:
        raise NotImplementedError

    def _least(self, candidates, key) -> Routable:
        return min(candidates, key=lambda r: (key(r), r.index))


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._next = 0

    def pick(self, rid: int) -> Routable:
        r = self.replicas[self._next]
        self._next = (self._next + 1) % len(self.replicas)
        return r


class LeastOutstanding(Router):
    """Fewest requests queued or running (vLLM production-stack / JSQ)."""

    name = "least-outstanding"

    def pick(self, rid: int) -> Routable:
        return self._least(self.replicas, lambda r: r.outstanding)


class LeastKvLoad(Router):
    """Lowest share of KV blocks in use, then fewest outstanding requests."""

    name = "least-kv"

    def pick(self, rid: int) -> Routable:
        return self._least(self.replicas, lambda r: (r.kv_load(), r.outstanding))


class PowerOfTwo(Router):
    """Two replicas drawn at random; the one with fewer outstanding requests wins."""

    name = "power-of-two"

    def pick(self, rid: int) -> Routable:
        if len(self.replicas) == 1:
            return self.replicas[0]
        a, b = self.rng.choice(len(self.replicas), 2, replace=False)
        return self._least((self.replicas[a], self.replicas[b]), lambda r: r.outstanding)


class PrefixAffinity(Router):
    """Requests that share their first KV block go to the same replica (where that prefix is
    cached); a prefix seen for the first time goes to the least loaded replica."""

    name = "prefix-affinity"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._home: dict[int, Routable] = {}

    def pick(self, rid: int) -> Routable:
        key = self.table.first_prefix_block(rid) if self.table is not None else None
        if key is None:
            return self._least(self.replicas, lambda r: r.outstanding)
        home = self._home.get(key)
        if home is None:
            home = self._home[key] = self._least(self.replicas, lambda r: r.outstanding)
        return home


ROUTERS = {r.name: r for r in (RoundRobin, LeastOutstanding, LeastKvLoad, PowerOfTwo, PrefixAffinity)}


def make_router(name: str, replicas: list[Routable], rng: np.random.Generator, table) -> Router:
    return ROUTERS[name](replicas, rng, table)
