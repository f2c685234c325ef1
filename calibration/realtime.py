"""Running a prepared scenario on the engine in real time, recording its steps."""

from __future__ import annotations

import time

import simpy
import simpy.rt
from simpy.core import EmptySchedule, Infinity

from sim.loops.run import RunResult, drive
from sim.scenario.schema import Scenario


class StepRecorder:
    """Wraps the engine's executor to keep every step's shape (for the step-level error)."""

    def __init__(self, executor):
        self.executor = executor
        self.shapes = []

    def run(self, plan, table):
        self.shapes.append(plan.shape())
        return self.executor.run(plan, table)


class SpinningRealtimeEnvironment(simpy.rt.RealtimeEnvironment):
    """Real time, but waits for the next event by spinning instead of sleeping, so the engine
    keeps its CPU core (and caches) while idle. On a shared machine a sleeping process wakes
    to a core other processes have used, and its next step runs slower."""

    def step(self) -> None:
        when = self.peek()
        if when is Infinity:
            raise EmptySchedule
        real_time = self.real_start + (when - self.env_start) * self.factor
        while time.monotonic() < real_time:
            pass
        simpy.Environment.step(self)


class EngineRuns:
    """The engine as validation uses it: loaded and pinned to a scenario (``prepare``), then
    run on the scenario in real time (``run``). Tests put a stand-in on a virtual clock here."""

    def __init__(self, setup, idle: str = "sleep"):
        self.setup = setup
        self.idle = idle

    def prepare(self, scenario: Scenario, source: str):
        """(the scenario pinned to the engine's KV blocks, the executor)."""
        from engine.execute import prepare

        return prepare(scenario, self.setup, source)

    def run(self, pinned: Scenario, executor, source: str) -> RunResult:
        return run_engine(pinned, executor, self.setup, source, self.idle)


def run_engine(pinned: Scenario, executor, setup, source: str, idle: str = "sleep") -> RunResult:
    """``servesim execute`` on a prepared engine; ``idle="spin"`` busy-waits between events."""
    from engine.execute import execute

    if idle == "sleep":
        return execute(pinned, setup, source, prepared=(pinned, executor))
    env = SpinningRealtimeEnvironment(factor=1.0, strict=False)
    start = env.now

    def clock() -> float:
        return (time.monotonic() - env.real_start) + start

    return drive(pinned, lambda _: executor, env=env, clock=clock)
