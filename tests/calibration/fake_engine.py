"""A stand-in for the engine whose step times are given, on a virtual clock.

:class:`FakeExecutor` runs BatchPlans like :class:`engine.executor.EngineExecutor` (the same
attributes :class:`engine.plan_timer.PlanTimer` and calibration use) but takes no time: each
step advances its own clock by the seconds of its ops, a known linear function of the step's
shape (``OPS``), and a per-op timer reading that clock times each op. The serving loop around
it costs ``LOOP`` seconds per step (fixed, per row) on that clock too (:func:`drive`, on the
SimPy loop's virtual time). So calibration and validation run their whole pipeline — grids,
rounds, medians, fits, the loop overhead, the speed probe, the engine run, the simulation and
the comparison — and every figure they report is known in advance, on any machine, under any load.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from sim.core.plan import StepResult
from sim.scenario.specs import get_model

MODEL = "tiny-llama-12m"

# Seconds of each op of a step: constant + per unit of the op's size (the sizes of ``size``), at
# about the speed of tiny-llama-12m on one CPU thread (the serving loop's requests batch up).
OPS = {
    "embed": (2e-4, 1e-5, "tokens"), "qkv_proj": (1e-3, 4e-5, "tokens"), "o_proj": (5e-4, 2e-5, "tokens"),
    "gate_up_proj": (1.5e-3, 8e-5, "tokens"), "down_proj": (8e-4, 4e-5, "tokens"),
    "input_norm": (1e-4, 2e-6, "tokens"), "rope": (1e-4, 3e-6, "tokens"), "kv_write": (1e-4, 5e-6, "tokens"),
    "post_attn_norm": (1e-4, 2e-6, "tokens"), "act": (1e-4, 4e-6, "tokens"), "final_norm": (5e-5, 1e-6, "tokens"),
    "lm_head": (3e-4, 6e-4, "sampled"), "sample": (1e-4, 1e-4, "sampled"),
    "prepare_inputs": (2e-3, 2e-4, "seqs"),
}
ROW_S = 1e-3  # attention's cost per row, prefill or decode alike
PREFILL_ATTN_S = 2e-8  # per query x key token of a prefill chunk
DECODE_CONTEXT_S = 4e-7  # per key token a decode reads
LOOP = (4e-3, 3e-4)  # the serving loop's seconds per step: fixed, per row


def op_seconds(shape) -> dict[str, float]:
    size = {"tokens": shape.num_tokens, "sampled": shape.num_sampled, "seqs": shape.num_seqs}
    out = {op: c + k * size[unit] for op, (c, k, unit) in OPS.items()}
    out["attention"] = (ROW_S * shape.num_seqs + PREFILL_ATTN_S * shape.prefill_attn
                        + DECODE_CONTEXT_S * shape.decode_context)
    return out


def step_seconds(shape) -> float:
    return sum(op_seconds(shape).values())


def step_coefficients() -> dict[str, float]:
    """The step as the profile's whole-step fit writes it (``sim.pricing.profile.STEP_FEATURES``)."""
    by = {"tokens": 0.0, "sampled": 0.0, "seqs": 0.0}
    const = 0.0
    for c, k, unit in OPS.values():
        const += c
        by[unit] += k
    return {"const": const, "num_tokens": by["tokens"], "prefill_attn": PREFILL_ATTN_S,
            "decode_context": DECODE_CONTEXT_S, "num_seqs": by["seqs"] + ROW_S, "num_sampled": by["sampled"]}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class _Blocks:
    free_ids: deque


class FakeExecutor:
    """An engine whose step times are ``op_seconds`` of the plan's shape, on ``clock``."""

    block_size = 16
    num_blocks = 2048

    def __init__(self, clock: Clock | None = None):
        self.spec = get_model(MODEL)
        self.clock = clock or Clock()
        self.blocks = _Blocks(deque(range(self.num_blocks)))
        self.requests: dict[int, int] = {}
        self.timer = None
        self.steps = 0

    @property
    def max_context(self) -> int:
        return min(self.spec.max_model_len, self.num_blocks * self.block_size)

    def warmup(self, *args, **kwargs) -> None:
        pass

    def reset(self) -> None:
        self.requests.clear()

    def add_request(self, rid: int, prompt_ids=None) -> None:
        self.requests[rid] = 0 if prompt_ids is None else len(prompt_ids)

    def run(self, plan, table) -> StepResult:
        ops = op_seconds(plan.shape())
        start = self.clock.t
        for op, seconds in ops.items():
            if self.timer is None:
                self.clock.t += seconds
            else:
                with self.timer(op):
                    self.clock.t += seconds
        self.steps += 1
        return StepResult(self.clock.t - start, np.zeros(plan.num_seqs, dtype=bool))


class _WithLoop:
    """The serving loop's own cost around a step: the step lasts ``LOOP`` longer than the
    executor's ``run`` said (what ``servesim execute`` logs, against what the engine timed)."""

    def __init__(self, executor):
        self.executor = executor

    def run(self, plan, table) -> StepResult:
        r = self.executor.run(plan, table)
        return StepResult(r.duration + LOOP[0] + LOOP[1] * plan.num_seqs, r.stopped)


def drive(scenario, executor):
    """``servesim execute``'s serving loop on virtual time: each step lasts what the stand-in
    engine and the loop around it take."""
    from sim.loops.run import drive as drive_loop

    return drive_loop(scenario, lambda _e: _WithLoop(executor), mode="execute")


def target():
    """A :class:`calibration.calibrate.Target` on a fresh stand-in engine."""
    from calibration.calibrate import Target
    from engine.timing import SyncTimer

    ex = FakeExecutor()
    return Target(ex, ex.spec, "fp32", SyncTimer("cpu", clock=ex.clock), drive)


class FakeEngineRuns:
    """:class:`calibration.realtime.EngineRuns` for the stand-in: the scenario pinned to its KV
    blocks, each run on virtual time with the serving loop's cost."""

    def __init__(self, setup=None, idle: str = "sleep"):
        self.executor = FakeExecutor()

    def prepare(self, scenario, source: str):
        from sim.scenario.load import apply_overrides, scenario_from_dict

        data = scenario.model_dump(mode="json", exclude={"base_dir"})
        data = apply_overrides(data, [f"hardware.kv_blocks={self.executor.num_blocks}"], source)
        return scenario_from_dict(data, source, scenario.base_dir), self.executor

    def run(self, pinned, executor, source: str):
        return drive(pinned, executor)
