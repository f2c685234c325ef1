"""Per-operation timers to plug into ``LlamaModel.timer`` / ``EngineExecutor(timer=...)``.

A timer is any callable ``timer(op) -> context manager``. :class:`SyncTimer` synchronises the
device around each op and reads the wall clock (exact attribution, but it serialises the
GPU); :class:`CudaEventTimer` records CUDA events and resolves them once in ``totals()``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

import torch


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class SyncTimer:
    """Sums wall seconds per op name, synchronising the device at both ends of each op.
    ``clock``: what it reads (the wall by default; a stand-in engine's own in tests)."""

    def __init__(self, device: torch.device | str = "cpu", clock: Callable[[], float] = time.perf_counter):
        self.device = torch.device(device)
        self.clock = clock
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def __call__(self, op: str):
        synchronize(self.device)
        t0 = self.clock()
        try:
            yield
        finally:
            synchronize(self.device)
            self.seconds[op] += self.clock() - t0
            self.calls[op] += 1

    def totals(self) -> dict[str, float]:
        return dict(self.seconds)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


class CudaEventTimer:
    """Records a CUDA event pair per op without synchronising; ``totals()`` waits once."""

    def __init__(self):
        self.events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def __call__(self, op: str):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end.record()
            self.events.append((op, start, end))

    def totals(self) -> dict[str, float]:
        """Seconds per op name."""
        torch.cuda.synchronize()
        out: dict[str, float] = defaultdict(float)
        for op, start, end in self.events:
            out[op] += start.elapsed_time(end) / 1e3
        return dict(out)

    def reset(self) -> None:
        self.events.clear()
