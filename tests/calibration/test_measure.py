"""Timing plans in the state the serving loop runs them in."""

from __future__ import annotations

import pytest

from calibration.measure import measure
from calibration.progress import Ticker
from engine.plan_timer import Row, decode_rows

# How much slower a step runs as the 1st, 2nd, 3rd ... run of its plan after another plan's
# (the CPU engine's steps settle over a few runs: caches, prefetchers, allocator state).
AFTER_OTHER = (1.4, 1.15, 1.05)


class SettlingHarness:
    """A harness whose step time depends on how many runs in a row repeated the plan."""

    block_size = 16

    def __init__(self) -> None:
        self.last: tuple | None = None
        self.streak = 0

    @staticmethod
    def base(rows) -> float:
        return 1e-3 * (1 + sum(r.new for r in rows))

    def run(self, rows, timer=None) -> float:
        key = tuple(rows)
        self.streak = self.streak + 1 if key == self.last else 0
        self.last = key
        slow = AFTER_OTHER[self.streak] if self.streak < len(AFTER_OTHER) else 1.0
        return self.base(rows) * slow


PLANS = [decode_rows(1, 64), decode_rows(8, 64), [Row(0, 128)]]


@pytest.mark.parametrize("settle, factor", [(1, 1.15), (2, 1.05), (3, 1.0), (4, 1.0)])
def test_each_plan_is_timed_after_settling_runs_of_itself(settle, factor):
    samples = measure(SettlingHarness(), PLANS, repeats=3, warmup=1, ticker=Ticker(None), settle=settle)
    for s in samples:
        assert s.wall == pytest.approx(factor * SettlingHarness.base(s.rows))
