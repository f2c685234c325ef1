"""The waiting queue: first come, first served within a priority level (lower first)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


class WaitQueue:
    def __init__(self) -> None:
        self._levels: dict[int, deque[int]] = {}
        self._order: list[int] = []  # priority levels present, ascending
        self._n = 0

    def _level(self, priority: int) -> deque[int]:
        q = self._levels.get(priority)
        if q is None:
            q = self._levels[priority] = deque()
            self._order = sorted(self._levels)
        return q

    def append(self, rid: int, priority: int = 0) -> None:
        self._level(priority).append(rid)
        self._n += 1

    def appendleft(self, rid: int, priority: int = 0) -> None:
        self._level(priority).appendleft(rid)
        self._n += 1

    def _first(self) -> deque[int]:
        for p in self._order:
            if self._levels[p]:
                return self._levels[p]
        raise IndexError("the waiting queue is empty")

    def __getitem__(self, i: int) -> int:
        if i != 0:
            raise IndexError("only the head of the queue can be peeked")
        return self._first()[0]

    def popleft(self) -> int:
        self._n -= 1
        return self._first().popleft()

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[int]:
        for p in self._order:
            yield from self._levels[p]
