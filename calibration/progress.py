"""A rich progress bar over measurements (silent when not wanted)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Ticker:
    """``tick()`` after each measurement; ``stage(name, total)`` starts a new bar."""

    def __init__(self, progress: Progress | None):
        self.progress = progress
        self.task = None
        self.total = 0

    def stage(self, name: str, total: int) -> None:
        if self.progress is None:
            return
        if self.task is not None:  # a stage whose count was an estimate ends full
            self.progress.update(self.task, completed=self.total)
        self.total = max(total, 1)
        self.task = self.progress.add_task(name, total=self.total)

    def tick(self, n: int = 1) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, n)


@contextmanager
def ticker(enabled: bool = True, console: Console | None = None) -> Iterator[Ticker]:
    if not enabled:
        yield Ticker(None)
        return
    columns = (TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console or Console(stderr=True)) as bar:
        yield Ticker(bar)
